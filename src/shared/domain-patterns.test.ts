import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  coversPattern,
  matchesDomain,
  normalizeHostName,
  parseDomainPattern,
} from "./domain-patterns.js";

describe("domain patterns", () => {
  it("parses names and wildcards, normalized; refuses addresses and junk", () => {
    assert.deepEqual(parseDomainPattern("Example.COM."), {
      entry: "example.com",
      name: "example.com",
      wildcard: false,
    });
    assert.deepEqual(parseDomainPattern("*.allowed.test"), {
      entry: "*.allowed.test",
      name: "allowed.test",
      wildcard: true,
    });
    for (const bad of [
      "1.2.3.4",
      "10.0.0.0/8",
      "",
      "*",
      "*.",
      "nope",
      "*.com",
      "a..b",
      "-a.com",
      "a-.com",
      "a b.com",
      "**.a.com",
      "a.*.com",
      `${"a".repeat(64)}.com`,
    ])
      assert.equal(parseDomainPattern(bad), undefined, bad);
  });

  it("an exact entry names that host; a wildcard every name below, not itself", () => {
    const patterns = ["api.example.com", "*.allowed.test"].map(
      (e) => parseDomainPattern(e) ?? assert.fail(e),
    );
    for (const yes of ["api.example.com", "API.Example.com.", "a.allowed.test", "b.c.allowed.test"])
      assert.equal(matchesDomain(yes, patterns), true, yes);
    for (const no of [
      "example.com",
      "x.api.example.com",
      "allowed.test",
      "evilallowed.test",
      "allowed.test.evil",
      "1.2.3.4",
      "",
    ])
      assert.equal(matchesDomain(no, patterns), false, no);
  });

  it("normalizes host names and refuses IP literals", () => {
    assert.equal(normalizeHostName("WWW.Example.org."), "www.example.org");
    assert.equal(normalizeHostName("198.51.100.1"), undefined);
    assert.equal(normalizeHostName("[::1]"), undefined);
  });
});

it("says when one pattern covers every name of another", () => {
  const p = (entry: string) =>
    parseDomainPattern(entry) as NonNullable<ReturnType<typeof parseDomainPattern>>;
  const covers = (allowed: string, domain: string) => coversPattern(p(allowed), p(domain));
  assert.equal(covers("api.example.com", "api.example.com"), true);
  assert.equal(covers("api.example.com", "evil.example.com"), false);
  assert.equal(covers("api.example.com", "*.api.example.com"), false);
  assert.equal(covers("*.example.com", "api.example.com"), true);
  assert.equal(covers("*.example.com", "a.b.example.com"), true);
  assert.equal(covers("*.example.com", "*.example.com"), true);
  assert.equal(covers("*.example.com", "*.api.example.com"), true);
  assert.equal(covers("*.example.com", "example.com"), false, "a wildcard is below its name only");
  assert.equal(covers("*.api.example.com", "*.example.com"), false);
  assert.equal(covers("*.example.com", "example.com.evil.test"), false);
  assert.equal(covers("*.example.com", "badexample.com"), false);
});
