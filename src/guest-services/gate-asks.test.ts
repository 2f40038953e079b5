// What the server gives a gate in the guest services process that asks: only what the
// slot's own policy would have it use. The asks come from a process that parses hostile
// input, so each is written here as a compromised process would send it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SecretHostRefusedError, validateEgressPolicy } from "../network/index.js";
import { answerAsk, type GateSupplies } from "./gate-asks.js";

const SECRETS: Record<string, string> = { "team-a/api-key": "sk-a", "team-b/api-key": "sk-b" };

const supplies: GateSupplies = {
  rules: {
    leafFor: async (name) => ({ cert: `cert for ${name}`, key: "key" }),
    secretValue: async (team, name, host) => {
      if (name === "bound" && host !== "api.ruled.test")
        throw new SecretHostRefusedError(name, host);
      return SECRETS[`${team}/${name}`];
    },
  },
};

const policy = validateEgressPolicy({
  allowInternet: true,
  allowOut: [],
  denyOut: [],
  secretsOf: "team-a",
  headerRules: [
    {
      domain: "*.ruled.test",
      headers: [
        ["authorization", "Bearer ${e2b.secrets.api-key}"],
        ["x-bound", "${e2b.secrets.bound}"],
      ],
    },
  ],
});

describe("answerAsk", () => {
  it("gives the secret the slot's rule names for that host, of the slot's own team", async () => {
    const ask = { kind: "secret", slot: "s1", name: "api-key", host: "api.ruled.test" } as const;
    assert.deepEqual(await answerAsk(ask, policy, supplies), { type: "answer", value: "sk-a" });
  });

  it("refuses a secret the rule does not name, or for a host no rule covers", async () => {
    for (const [name, host] of [
      ["other", "api.ruled.test"],
      ["api-key", "evil.test"],
      ["api-key", "ruled.test"], // *.ruled.test covers names below it only
    ] as const) {
      const answer = await answerAsk({ kind: "secret", slot: "s1", name, host }, policy, supplies);
      assert.equal(answer.type, "refusal", `${name} for ${host}`);
      assert.equal(answer.type === "refusal" && answer.reason, "refused");
    }
  });

  it("never answers for a slot the server has no gate policy for (another team's secrets)", async () => {
    const ask = { kind: "secret", slot: "s9", name: "api-key", host: "api.ruled.test" } as const;
    assert.equal((await answerAsk(ask, undefined, supplies)).type, "refusal");
    const unteamed = validateEgressPolicy({ ...policy, secretsOf: undefined });
    assert.equal((await answerAsk(ask, unteamed, supplies)).type, "refusal");
  });

  it("says a bound secret's host was refused, and an unknown one is missing", async () => {
    const bound = await answerAsk(
      { kind: "secret", slot: "s1", name: "bound", host: "x.ruled.test" },
      policy,
      supplies,
    );
    assert.equal(bound.type === "refusal" && bound.reason, "host");
    const unknown = validateEgressPolicy({
      ...policy,
      headerRules: [{ domain: "*.ruled.test", headers: [["a", "${e2b.secrets.nope}"]] }],
    });
    assert.deepEqual(
      await answerAsk(
        { kind: "secret", slot: "s1", name: "nope", host: "a.ruled.test" },
        unknown,
        supplies,
      ),
      { type: "answer", value: null },
    );
  });

  it("issues a certificate only for a name the slot's rules cover, and none without rules", async () => {
    assert.deepEqual(
      await answerAsk({ kind: "leaf", slot: "s1", name: "api.ruled.test" }, policy, supplies),
      { type: "answer", value: { cert: "cert for api.ruled.test", key: "key" } },
    );
    const other = await answerAsk(
      { kind: "leaf", slot: "s1", name: "bank.test" },
      policy,
      supplies,
    );
    assert.equal(other.type, "refusal");
    const noRules = await answerAsk({ kind: "leaf", slot: "s1", name: "api.ruled.test" }, policy, {
      resolver: "127.0.0.1:53",
    });
    assert.equal(noRules.type, "refusal");
  });

  it("hides why a supply failed (no secret store detail reaches the process)", async () => {
    const failing: GateSupplies = {
      rules: {
        leafFor: async () => {
          throw new Error("database password wrong at db.internal:5432");
        },
        secretValue: async () => undefined,
      },
    };
    const answer = await answerAsk(
      { kind: "leaf", slot: "s1", name: "api.ruled.test" },
      policy,
      failing,
    );
    assert.deepEqual(answer, {
      type: "refusal",
      reason: "failed",
      message: "could not be answered",
    });
  });
});
