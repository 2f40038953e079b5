import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterEach, beforeEach, describe, it } from "node:test";
import { createTestCa } from "../../../test/helpers/test-ca.js";
import { ENVD_INIT_STEPS, ENVD_INIT_STEPS_HEADER, INIT_SEED_BYTES } from "../../protocol/index.js";
import { WarrenError } from "../../shared/index.js";
import { AgentState } from "../state.js";
import { installCaCertificates } from "../trust-store.js";
import { handleInit, type InitHooks } from "./init.js";

/** A POST /init as the router hands it over: the body as a stream, the headers. */
function request(body: unknown, headers: Record<string, string> = {}): IncomingMessage {
  return Object.assign(Readable.from([Buffer.from(JSON.stringify(body))]), {
    headers,
  }) as unknown as IncomingMessage;
}

/** The status handleInit answered with (it throws instead on refusals), and its headers. */
function response(): {
  res: ServerResponse;
  status: () => number | undefined;
  headers: () => Record<string, string>;
} {
  let status: number | undefined;
  let headers: Record<string, string> = {};
  const res = {
    writeHead(code: number, sent: Record<string, string> = {}) {
      status = code;
      headers = sent;
      return res;
    },
    end() {
      return res;
    },
  };
  return { res: res as unknown as ServerResponse, status: () => status, headers: () => headers };
}

/** A seeder that records copies of what it was handed, and the buffers themselves. */
function recordingSeeder() {
  const copies: Buffer[] = [];
  const handed: Buffer[] = [];
  const hooks: InitHooks = {
    setClock: undefined,
    mountVolume: undefined,
    trustCa: undefined,
    seedRandomness: (seed) => {
      handed.push(seed);
      copies.push(Buffer.from(seed));
    },
  };
  return { hooks, copies, handed };
}

async function init(state: AgentState, hooks: InitHooks, body: unknown, token?: string) {
  const { res, status } = response();
  await handleInit(state, hooks, request(body, token ? { "x-access-token": token } : {}), res);
  return status();
}

const seedOf = (bytes: Buffer) => bytes.toString("base64");

describe("POST /init seed", () => {
  // Everything the process prints while a test runs (still printed: the test runner reports
  // through stdout). No seed may be in it, in any encoding.
  let written: string[] = [];
  const originals = { stdout: process.stdout.write, stderr: process.stderr.write };
  beforeEach(() => {
    written = [];
    for (const stream of ["stdout", "stderr"] as const) {
      const original = originals[stream];
      process[stream].write = function (this: NodeJS.WriteStream, chunk: unknown, ...rest) {
        written.push(String(chunk));
        return original.call(this, chunk as string, ...(rest as []));
      } as typeof process.stdout.write;
    }
  });
  afterEach(() => {
    process.stdout.write = originals.stdout;
    process.stderr.write = originals.stderr;
  });
  const printed = (seed: Buffer) =>
    written.some(
      (text) => text.includes(seed.toString("base64")) || text.includes(seed.toString("hex")),
    );

  it("hands the seed's 32 bytes to the seeder, then wipes them; nothing is printed", async () => {
    const { hooks, copies, handed } = recordingSeeder();
    const bytes = randomBytes(INIT_SEED_BYTES);
    const state = new AgentState();
    assert.equal(await init(state, hooks, { seed: seedOf(bytes), envVars: { A: "1" } }), 204);
    assert.deepEqual(copies, [bytes]);
    assert.deepEqual(handed[0], Buffer.alloc(INIT_SEED_BYTES), "wiped after use");
    assert.deepEqual(state.envVars, { A: "1" });
    assert.equal(printed(bytes), false);
  });

  it("refuses a seed of another size or not in base64, before anything is applied", async () => {
    const { hooks, copies } = recordingSeeder();
    const state = new AgentState();
    const short = randomBytes(16);
    for (const seed of [
      seedOf(short),
      seedOf(randomBytes(33)),
      "",
      randomBytes(INIT_SEED_BYTES).toString("base64url"),
      `${seedOf(randomBytes(INIT_SEED_BYTES)).slice(0, -4)}@@@=`,
      1234,
    ]) {
      await assert.rejects(
        init(state, hooks, { seed, envVars: { A: "1" }, accessToken: "t" }),
        (err: unknown) => {
          assert.ok(err instanceof WarrenError);
          assert.equal(err.kind, "invalid_argument");
          assert.equal(err.status, 400);
          if (typeof seed === "string" && seed)
            assert.ok(!err.message.includes(seed), `"${err.message}" quotes the seed`);
          return true;
        },
      );
    }
    assert.deepEqual(copies, [], "never seeded");
    assert.deepEqual(state.envVars, {}, "nothing else applied");
    assert.equal(state.accessToken, undefined);
    assert.equal(printed(short), false);
  });

  it("seeds only once the access token is proven", async () => {
    const { hooks, copies } = recordingSeeder();
    const state = new AgentState();
    state.accessToken = "secret";
    const seed = seedOf(randomBytes(INIT_SEED_BYTES));
    await assert.rejects(init(state, hooks, { seed }), /access token reset not authorized/);
    assert.deepEqual(copies, []);
    assert.equal(await init(state, hooks, { seed }, "secret"), 204);
    assert.equal(copies.length, 1);
  });

  it("applies the seed of a stale /init, and nothing else of it", async () => {
    const { hooks, copies } = recordingSeeder();
    const state = new AgentState();
    const now = Date.now();
    const first = { timestamp: new Date(now).toISOString(), envVars: { A: "new" } };
    assert.equal(await init(state, hooks, first), 204);
    const bytes = randomBytes(INIT_SEED_BYTES);
    const stale = {
      timestamp: new Date(now - 1_000).toISOString(),
      envVars: { A: "stale" },
      seed: seedOf(bytes),
    };
    assert.equal(await init(state, hooks, stale), 204);
    assert.deepEqual(copies, [bytes]);
    assert.deepEqual(state.envVars, { A: "new" });
  });

  it("outside a guest (no seeder) checks the seed and drops it", async () => {
    const state = new AgentState();
    const hooks: InitHooks = {
      setClock: undefined,
      seedRandomness: undefined,
      mountVolume: undefined,
      trustCa: undefined,
    };
    assert.equal(await init(state, hooks, { seed: seedOf(randomBytes(INIT_SEED_BYTES)) }), 204);
    await assert.rejects(init(state, hooks, { seed: "short" }), /standard base64/);
  });

  it("fails the /init when the seeder fails: a clone must not run on its siblings' state", async () => {
    const state = new AgentState();
    let handed: Buffer | undefined;
    const hooks: InitHooks = {
      setClock: undefined,
      mountVolume: undefined,
      trustCa: undefined,
      seedRandomness: (seed) => {
        handed = seed;
        throw new WarrenError("internal", "cannot reseed the guest kernel's random pool: EPERM");
      },
    };
    await assert.rejects(
      init(state, hooks, {
        seed: seedOf(randomBytes(INIT_SEED_BYTES)),
        envVars: { A: "1" },
      }),
      /cannot reseed/,
    );
    assert.deepEqual(handed, Buffer.alloc(INIT_SEED_BYTES), "wiped on failure too");
    assert.deepEqual(state.envVars, {});
  });
});

describe("POST /init caCertificates", () => {
  const ca = createTestCa("test egress CA");

  it("installs them once, and points Node and requests at them unless the sandbox says otherwise", async () => {
    const root = mkdtempSync(join(tmpdir(), "warren-init-trust-"));
    try {
      mkdirSync(join(root, "etc/ssl/certs"), { recursive: true });
      writeFileSync(join(root, "etc/ssl/certs/ca-certificates.crt"), "# the image's roots\n");
      let installs = 0;
      const hooks: InitHooks = {
        setClock: undefined,
        seedRandomness: undefined,
        mountVolume: undefined,
        trustCa: (pem) => {
          installs++;
          return installCaCertificates(pem, root);
        },
      };
      const state = new AgentState();
      const body = { caCertificates: ca.cert, envVars: { REQUESTS_CA_BUNDLE: "/mine.pem" } };
      assert.equal(await init(state, hooks, body), 204);
      assert.equal(await init(state, hooks, body), 204);
      assert.equal(installs, 1, "the same certificates are not installed again");
      assert.equal(state.envVars.REQUESTS_CA_BUNDLE, "/mine.pem");
      assert.equal(
        state.envVars.NODE_EXTRA_CA_CERTS,
        join(root, "usr/local/share/ca-certificates/warren-egress.crt"),
      );
      const bundle = readFileSync(join(root, "etc/ssl/certs/ca-certificates.crt"), "utf8");
      assert.equal(bundle, `# the image's roots\n${ca.cert}`);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("refuses what is not a CA certificate; outside a guest drops them", async () => {
    const state = new AgentState();
    const hooks: InitHooks = {
      setClock: undefined,
      seedRandomness: undefined,
      mountVolume: undefined,
      trustCa: async () => assert.fail("not to be installed"),
    };
    await assert.rejects(init(state, hooks, { caCertificates: "hello" }), /no PEM certificate/);
    const leaf = ca.issue("a.test").cert.split("-----END CERTIFICATE-----")[0];
    await assert.rejects(
      init(state, hooks, { caCertificates: `${leaf}-----END CERTIFICATE-----\n` }),
      /not a usable CA/,
    );
    const outside: InitHooks = { ...hooks, trustCa: undefined };
    assert.equal(await init(state, outside, { caCertificates: ca.cert }), 204);
    assert.equal(state.envVars.NODE_EXTRA_CA_CERTS, undefined);
  });
});

describe("POST /init steps", () => {
  it("says where its time went, each step once, in order (the server's create split)", async () => {
    const { res, status, headers } = response();
    const slowTrust: InitHooks = {
      setClock: undefined,
      mountVolume: undefined,
      seedRandomness: undefined,
      trustCa: async () => {
        await new Promise((resolve) => setTimeout(resolve, 30));
        return { anchor: "/a" };
      },
    };
    const ca = createTestCa("a CA to trust");
    await handleInit(new AgentState(), slowTrust, request({ caCertificates: ca.cert }), res);
    assert.equal(status(), 204);
    const steps = headers()
      [ENVD_INIT_STEPS_HEADER]?.split(",")
      .map((s) => s.split("="));
    assert.deepEqual(
      steps?.map(([name]) => name),
      [...ENVD_INIT_STEPS],
    );
    const trust = Number(steps?.find(([name]) => name === "trust")?.[1]);
    assert.ok(trust >= 25, `the trust step took its 30 ms: ${trust}`);
  });
});
