/**
 * Shared pieces of the fuzz tests (fast-check): bounded runs with a printed seed, and the
 * bad inputs both the API and envd are fed (ids, path segments, query strings, headers).
 *
 * WARREN_FUZZ_SEED replays a run (the failure message prints its seed and path);
 * WARREN_FUZZ_RUNS scales every fuzz test's case count (default: each test's own).
 */
import type { TestContext } from "node:test";
import fc from "fast-check";

export { fc };

/** Runs and seed of one fuzz property: the count is the test's own unless WARREN_FUZZ_RUNS says. */
export function fuzzParameters(t: TestContext, defaultRuns: number): fc.Parameters<unknown> {
  const runs = Number(process.env.WARREN_FUZZ_RUNS ?? defaultRuns);
  const seed = Number(process.env.WARREN_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
  t.diagnostic(`fuzz seed ${seed} (replay: WARREN_FUZZ_SEED=${seed}), ${runs} runs`);
  return { numRuns: runs, seed, endOnFailure: true, includeErrorInReport: true };
}

/** Prints how many cases ran (SPEC.md quotes the counts), with the statuses they got. */
export function reportCases(
  t: TestContext,
  name: string,
  cases: number,
  statuses?: ReadonlyMap<number | string, number>,
): void {
  const tally = statuses
    ? ` (${[...statuses]
        .sort(([a], [b]) => String(a).localeCompare(String(b)))
        .map(([status, n]) => `${status}: ${n}`)
        .join(", ")})`
    : "";
  const line = `fuzz ${name}: ${cases} cases${tally}`;
  t.diagnostic(line);
  process.stderr.write(`${line}\n`);
}

/** Strings that have broken parsers before: traversal, NULs, encodings, odd unicode, sizes. */
export const NASTY_STRINGS: readonly string[] = [
  "",
  " ",
  ".",
  "..",
  "../../../../etc/passwd",
  "%2e%2e%2f%2e%2e%2f",
  "..%2f..%2f",
  "%00",
  "a\u0000b",
  "%ZZ",
  "%",
  "~",
  "~root",
  "//",
  "\\..\\..\\",
  "é",
  "\u202e",
  "\ud800",
  "💩",
  "null",
  "undefined",
  "__proto__",
  "constructor",
  "-1",
  "1e309",
  "9007199254740993",
  "x".repeat(4096),
];

/** A string from the nasty list or a random one (any code points, sometimes long). */
export const nastyString: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...NASTY_STRINGS) },
  { weight: 3, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ minLength: 200, maxLength: 3000 }) },
);

/** JSON values with the awkward ones over-represented: deep, huge numbers, nasty strings. */
export const nastyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  nastyString,
  fc.constantFrom(
    -1,
    0,
    1,
    0.5,
    1e21,
    -1e308,
    Number.MAX_SAFE_INTEGER + 2,
    true,
    null,
    [],
    {},
    // An own "__proto__" key, as JSON.parse makes it (a literal would set the prototype).
    JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": 1}}'),
  ),
  fc.integer(),
  fc.double({ noNaN: true }),
);

/** An HTTP token (a header name a client can send). */
export const headerName: fc.Arbitrary<string> = fc.stringMatching(
  /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,30}$/,
);

/** A header value Node's client accepts (visible ASCII and spaces). */
export const headerValue: fc.Arbitrary<string> = fc.oneof(
  fc.stringMatching(/^[\x20-\x7e]{0,60}$/),
  fc.constantFrom("", "0", "-1", "application/json", "gzip", "Basic Og==", "Bearer x", "*"),
);

/**
 * Percent-encodes the UTF-8 bytes of `text`: unlike encodeURIComponent it takes any string
 * (a lone surrogate becomes U+FFFD's bytes rather than a URIError).
 */
export function percentEncode(text: string): string {
  let out = "";
  for (const byte of Buffer.from(text, "utf8")) {
    const char = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-_.~]/.test(char)
      ? char
      : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** `k=v&…` with keys from `known` or random, values nasty, sometimes malformed outright. */
export function queryString(known: readonly string[]): fc.Arbitrary<string> {
  const key = fc.oneof(fc.constantFrom(...known), fc.string({ maxLength: 10 }));
  const pair = fc
    .tuple(key, nastyString)
    .map(([k, v]) => `${percentEncode(k)}=${percentEncode(v)}`);
  return fc.oneof(
    { weight: 4, arbitrary: fc.array(pair, { maxLength: 5 }).map((pairs) => pairs.join("&")) },
    { weight: 1, arbitrary: fc.constantFrom("=", "&&", "a=%ZZ", "a=1&a=2&a=3", "%00=%00", "?") },
  );
}
