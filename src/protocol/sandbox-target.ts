import { isIP } from "node:net";
import { ENVD_PORT } from "./envd.js";

/** The sandbox and port a request is meant for. */
export interface ProxyTarget {
  readonly sandboxId: string;
  readonly port: number;
  /** Where the target came from: the Host name or the `e2b-sandbox-*` headers. */
  readonly via: "host" | "header";
}

export type TargetResult =
  | { readonly ok: true; readonly target: ProxyTarget }
  | { readonly ok: false; readonly message: string };

/** What target parsing reads from a request. */
export interface TargetInput {
  /** The Host header (may carry `:port`). */
  readonly host: string | undefined;
  /** The `e2b-sandbox-id` header. */
  readonly sandboxId: string | undefined;
  /** The `e2b-sandbox-port` header. */
  readonly sandboxPort: string | undefined;
  /** When set, Host routing only accepts `<port>-<id>.<domain>`, and `sandbox.<domain>`. */
  readonly domain?: string | undefined;
}

/** E2B sandbox ids: lowercase letters and digits, never `-` or `.`. */
const SANDBOX_ID = /^[a-z0-9]+$/;
const HOST_LABEL = /^(\d+)-([a-z0-9]+)$/;
const PORT = /^\d{1,5}$/;

/**
 * Where a request goes, as E2B's proxies decide (`packages/shared/pkg/proxy/host.go`):
 * - Host `localhost`, an IP literal or `sandbox.<domain>` with an `e2b-sandbox-id` header:
 *   the headers (`e2b-sandbox-port` defaults to envd's 49983);
 * - otherwise the Host's first label, `<port>-<sandboxId>`.
 * One addition: a Host whose first label is not `<port>-<id>` still routes by the headers
 * when they are present (a custom `E2B_SANDBOX_URL` host name works too).
 */
export function parseTarget(input: TargetInput): TargetResult {
  const hostname = hostnameOf(input.host);
  const domain = normalizeDomain(input.domain);
  if (input.sandboxId !== undefined && hostname !== undefined && isHeaderHost(hostname, domain)) {
    return fromHeaders(input.sandboxId, input.sandboxPort);
  }
  const fromHost = hostname === undefined ? undefined : parseHostLabel(hostname, domain);
  if (fromHost) return fromHost;
  if (input.sandboxId !== undefined) return fromHeaders(input.sandboxId, input.sandboxPort);
  const expected = domain ? `<port>-<sandboxId>.${domain}` : "<port>-<sandboxId>.<domain>";
  return {
    ok: false,
    message: `Invalid host ${JSON.stringify(input.host ?? "")}: expected ${expected}, or the e2b-sandbox-id header`,
  };
}

/** True when the Host names a sandbox port (`<port>-<sandboxId>.…`), valid or not. */
export function isSandboxHost(host: string | undefined, domain?: string): boolean {
  const hostname = hostnameOf(host);
  if (hostname === undefined) return false;
  const label = firstLabelUnder(hostname, normalizeDomain(domain));
  return label !== undefined && HOST_LABEL.test(label);
}

function fromHeaders(sandboxId: string, sandboxPort: string | undefined): TargetResult {
  if (!SANDBOX_ID.test(sandboxId)) {
    return { ok: false, message: `Invalid e2b-sandbox-id ${JSON.stringify(sandboxId)}` };
  }
  const port = sandboxPort === undefined ? ENVD_PORT : parsePort(sandboxPort);
  if (port === undefined) {
    return { ok: false, message: `Invalid e2b-sandbox-port ${JSON.stringify(sandboxPort)}` };
  }
  return { ok: true, target: { sandboxId, port, via: "header" } };
}

function parseHostLabel(hostname: string, domain: string | undefined): TargetResult | undefined {
  const label = firstLabelUnder(hostname, domain);
  if (label === undefined) return undefined;
  const match = HOST_LABEL.exec(label);
  if (!match) return undefined;
  const [, portText = "", sandboxId = ""] = match;
  const port = parsePort(portText);
  if (port === undefined) {
    return { ok: false, message: `Invalid port ${portText} in host ${hostname}: must be 1-65535` };
  }
  return { ok: true, target: { sandboxId, port, via: "host" } };
}

/** The first label, when the name has more than one and sits under `domain` (if given). */
function firstLabelUnder(hostname: string, domain: string | undefined): string | undefined {
  const dot = hostname.indexOf(".");
  if (dot <= 0) return undefined;
  if (domain !== undefined && hostname.slice(dot + 1) !== domain) return undefined;
  return hostname.slice(0, dot);
}

function isHeaderHost(hostname: string, domain: string | undefined): boolean {
  if (hostname === "localhost") return true;
  if (hostname.startsWith("[") && hostname.endsWith("]")) return isIP(hostname.slice(1, -1)) === 6;
  if (isIP(hostname) !== 0) return true;
  if (domain !== undefined) return hostname === `sandbox.${domain}`;
  return hostname.startsWith("sandbox.") && hostname.length > "sandbox.".length;
}

function parsePort(text: string): number | undefined {
  if (!PORT.test(text)) return undefined;
  const port = Number(text);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/** Lowercased host name without `:port` or a trailing dot; `[v6]` keeps its brackets. */
function hostnameOf(host: string | undefined): string | undefined {
  if (host === undefined) return undefined;
  let name = host.trim().toLowerCase();
  if (name.startsWith("[")) {
    const end = name.indexOf("]");
    if (end < 0) return undefined;
    name = name.slice(0, end + 1);
  } else if (isIP(name) !== 6) {
    const colon = name.lastIndexOf(":");
    if (colon >= 0) name = name.slice(0, colon);
  }
  if (name.endsWith(".")) name = name.slice(0, -1);
  return name === "" ? undefined : name;
}

function normalizeDomain(domain: string | undefined): string | undefined {
  if (domain === undefined) return undefined;
  const name = domain
    .trim()
    .toLowerCase()
    .replace(/^\.+|\.+$/g, "");
  return name === "" ? undefined : name;
}
