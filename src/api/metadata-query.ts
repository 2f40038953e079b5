/**
 * The `metadata` filter of the list routes. The SDK URL-encodes each key and value, joins
 * the pairs with URLSearchParams (`k=v&k2=v2`, encoding them a second time) and sends that
 * string as the single `metadata` parameter (a third encoding, which the query-string
 * parser undoes). As infra does (`parseFilters` in `utils/sandboxes_list.go`): unescape the
 * whole value, split on `&` and `=`, unescape each key and value.
 */
import { invalid } from "./input.js";

/** `raw` as the query-string parser left it; "" (an empty filter) matches everything. */
export function parseMetadataQuery(raw: string): Record<string, string> {
  if (raw === "") return {};
  const bad = (problem: string) => invalid("querystring/metadata", problem);
  const entries: [string, string][] = [];
  for (const pair of queryUnescape(raw, bad).split("&")) {
    const parts = pair.split("=");
    if (parts.length !== 2) throw bad(`must be key=value pairs joined by & (got "${pair}")`);
    const [key = "", value = ""] = parts.map((part) => queryUnescape(part, bad));
    if (key === "") throw bad("has an empty key");
    entries.push([key, value]);
  }
  // fromEntries defines own properties, so a "__proto__" key stays a plain key.
  return Object.fromEntries(entries);
}

/** Go's url.QueryUnescape: "+" is a space, %XX a byte; a broken escape is an error. */
function queryUnescape(s: string, bad: (problem: string) => Error): string {
  try {
    return decodeURIComponent(s.replaceAll("+", " "));
  } catch {
    throw bad("is not correctly URL-encoded");
  }
}
