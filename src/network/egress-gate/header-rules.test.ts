import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  fillHeaders,
  type HeaderRule,
  ruleFor,
  UnknownSecretError,
  validateHeaderRules,
} from "./header-rules.js";

const rule = (domain: string, ...headers: [string, string][]): HeaderRule => ({ domain, headers });

describe("header rules", () => {
  it("are checked: domains, header names, values and placeholders", () => {
    const ok = validateHeaderRules([rule("API.Example.com.", ["Authorization", "Bearer x"])]);
    assert.deepEqual(ok, [{ domain: "api.example.com", headers: [["Authorization", "Bearer x"]] }]);
    const refused: [HeaderRule[], RegExp][] = [
      [[rule("*")], /"\*" is not a domain/],
      [[rule("1.2.3.4")], /"1\.2\.3\.4" is not a domain/],
      [[rule("a.test"), rule("A.test")], /name a\.test twice/],
      [[rule("a.test", ["bad name", "x"])], /"bad name" is not a header name/],
      [[rule("a.test", ["Transfer-Encoding", "x"])], /Transfer-Encoding cannot be set/],
      [[rule("a.test", ["x", "a\r\nInjected: 1"])], /without line breaks/],
      [[rule("a.test", ["x", "a".repeat(8193)])], /longer than 8192 bytes/],
      [[rule("a.test", ["x", "${e2b.identity.tokens.aws}"])], /not supported by Warren/],
      [[rule("a.test", ["x", "${e2b.secrets.}"])], /"" in .* is not a secret name/],
    ];
    for (const [rules, message] of refused) {
      assert.throws(() => validateHeaderRules(rules), message, JSON.stringify(rules));
    }
    assert.throws(
      () => validateHeaderRules(Array.from({ length: 101 }, (_, i) => rule(`d${i}.test`))),
      /more than 100/,
    );
    // Anything else in `${...}` is text, as E2B leaves it.
    assert.doesNotThrow(() => validateHeaderRules([rule("a.test", ["x", "${HOME} $1"])]));
  });

  it("match an exact name first, then the longest wildcard; the apex is not a wildcard's", () => {
    const rules = validateHeaderRules([
      rule("*.example.com", ["x", "wide"]),
      rule("*.api.example.com", ["x", "narrow"]),
      rule("v1.api.example.com", ["x", "exact"]),
    ]);
    const of = (host: string) => ruleFor(host, rules)?.headers[0]?.[1];
    assert.equal(of("V1.API.example.com."), "exact");
    assert.equal(of("v2.api.example.com"), "narrow");
    assert.equal(of("a.b.example.com"), "wide");
    assert.equal(of("example.com"), undefined);
    assert.equal(of("api.example.com"), "wide");
    assert.equal(of("example.org"), undefined);
  });

  it("fill secrets in, later headers of a name winning; an unknown secret fails", async () => {
    const secrets: Record<string, string> = { key: "s3cr3t", other: "o" };
    const secret = async (name: string) => {
      const value = secrets[name];
      if (value === undefined) throw new UnknownSecretError(name);
      return value;
    };
    const filled = await fillHeaders(
      rule(
        "a.test",
        ["Authorization", "Bearer ${e2b.secrets.key}"],
        ["X-Both", "${e2b.secrets.key}:${e2b.secrets.other} ${HOME}"],
        ["authorization", "Token ${e2b.secrets.key}"],
      ),
      secret,
    );
    assert.deepEqual(
      [...filled],
      [
        ["authorization", "Token s3cr3t"],
        ["x-both", "s3cr3t:o ${HOME}"],
      ],
    );
    await assert.rejects(
      fillHeaders(rule("a.test", ["x", "${e2b.secrets.missing}"]), secret),
      (err) => err instanceof UnknownSecretError && err.secret === "missing",
    );
    secrets.key = "line\r\nbreak";
    await assert.rejects(
      fillHeaders(rule("a.test", ["x", "${e2b.secrets.key}"]), secret),
      /not a valid header value once filled in/,
    );
  });
});
