import type { IncomingMessage } from "node:http";

/** Why a guest's request is not relayed: the status it gets and what it says. */
export interface Refusal {
  readonly status: number;
  readonly message: string;
}

/**
 * Methods refused whatever the target. CONNECT would ask the upstream (a front that also
 * proxies) for a tunnel to anywhere; TRACE has the upstream echo the request it got back to
 * the guest, headers the gate set (a rule's secrets) included. 405: the request is well
 * formed and the method alone is what is refused.
 */
const REFUSED_METHODS = new Set(["CONNECT", "TRACE"]);

/**
 * Whether the gate may relay a request on a connection it decided (or terminated TLS) for
 * `name`, or why not. Only origin-form targets (`/path?query`): an absolute-form one
 * (`GET https://evil.example/ HTTP/1.1`) goes upstream verbatim and shared fronts route by
 * it rather than by Host, and authority-form and `*` name no resource of `name`. Exactly one
 * Host, and it names `name` (its port aside): a shared front routes by Host, so a request
 * for another name would reach another site over a connection allowed (and, with header
 * rules, given secrets) for this one. Another name allowed as well is refused all the same:
 * the connection's address is what Warren resolved `name` to, and browsers and HTTP
 * libraries never reuse an HTTP/1.1 connection for another host.
 */
export function refusalOf(req: IncomingMessage, name: string): Refusal | undefined {
  const method = req.method ?? "";
  if (REFUSED_METHODS.has(method)) {
    return { status: 405, message: `${method} is not relayed to ${name}` };
  }
  if (!req.url?.startsWith("/")) {
    return {
      status: 400,
      message: `only origin-form request targets (/path) are relayed, not "${printable(req.url)}"`,
    };
  }
  const hosts = hostHeaders(req.rawHeaders);
  if (hosts.length !== 1) {
    return { status: 400, message: `a request needs exactly one Host header, not ${hosts.length}` };
  }
  if (hostName(hosts[0] as string) !== name) {
    return {
      status: 421,
      message: `this connection is for ${name}, not "${printable(hosts[0])}"`,
    };
  }
  return undefined;
}

/** The name a Host header value gives: lower case, without its port or a trailing dot. */
export function hostName(host: string): string {
  return host.trim().replace(/:\d*$/, "").replace(/\.$/, "").toLowerCase();
}

function hostHeaders(rawHeaders: readonly string[]): string[] {
  const hosts: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() === "host") hosts.push(rawHeaders[i + 1] ?? "");
  }
  return hosts;
}

/** A guest's text quoted back to it: bounded, printable ASCII only. */
function printable(text: string | undefined): string {
  return (text ?? "").slice(0, 200).replace(/[^\x20-\x7e]/g, "?");
}
