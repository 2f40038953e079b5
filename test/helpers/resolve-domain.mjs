// `node --import ./resolve-domain.mjs`: test-local name resolution for domain mode. Names
// under WARREN_TEST_RESOLVE_DOMAIN (and the domain itself) resolve to
// WARREN_TEST_RESOLVE_ADDRESS, as a wildcard DNS record would make them; every other name
// resolves as usual. Patches dns.lookup, which net and tls (so undici, fetch and the e2b
// SDK) use for every connection. A test helper: nothing of Warren's loads it.
import { createRequire, syncBuiltinESMExports } from "node:module";

const domain = process.env.WARREN_TEST_RESOLVE_DOMAIN?.toLowerCase();
const address = process.env.WARREN_TEST_RESOLVE_ADDRESS;
if (!domain || !address) {
  throw new Error(
    "resolve-domain.mjs needs WARREN_TEST_RESOLVE_DOMAIN and WARREN_TEST_RESOLVE_ADDRESS",
  );
}
const dns = createRequire(import.meta.url)("node:dns");
const original = dns.lookup;
const family = address.includes(":") ? 6 : 4;

function covered(hostname) {
  const name = String(hostname).toLowerCase().replace(/\.$/, "");
  return name === domain || name.endsWith(`.${domain}`);
}

dns.lookup = function lookup(hostname, options, callback) {
  const cb = typeof options === "function" ? options : callback;
  const opts = typeof options === "function" || options === undefined ? {} : options;
  if (!covered(hostname)) return original.call(this, hostname, options, callback);
  const all = typeof opts === "object" && opts.all;
  process.nextTick(() => (all ? cb(null, [{ address, family }]) : cb(null, address, family)));
  return {};
};
syncBuiltinESMExports();
