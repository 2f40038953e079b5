import type { IncomingMessage } from "node:http";
import { isInternalPath, isSandboxHost, parseTarget } from "../protocol/index.js";
import { connectionNamesRouting, requestPath } from "../relay/index.js";

/**
 * What the gateway does with a request, from its method, path and headers alone. Sandbox
 * traffic (envd and app ports) and every call naming a sandbox are relayed to the node that
 * holds it; creates are placed; lists and many sandboxes' metrics are merged from every node; template calls go to the
 * template node, and so do volumes and secrets; `/nodes` is the gateway's own. A request
 * whose `Connection` header names a routing header, and any path of the nodes' internal
 * API, are refused before any of that.
 */
export type GatewayRoute =
  | { readonly kind: "routing_hop"; readonly names: readonly string[]; readonly proxy: boolean }
  | { readonly kind: "proxy"; readonly sandboxId: string }
  | { readonly kind: "proxy_invalid"; readonly message: string }
  | { readonly kind: "health" }
  | { readonly kind: "create" }
  | { readonly kind: "list"; readonly version: 1 | 2 }
  | { readonly kind: "metrics" }
  | { readonly kind: "snapshots" }
  | { readonly kind: "sandbox"; readonly sandboxId: string; readonly action: string }
  | { readonly kind: "templates"; readonly signedUpload: boolean }
  | { readonly kind: "volumes"; readonly content: boolean }
  | { readonly kind: "team_catalog" }
  | { readonly kind: "nodes" }
  | { readonly kind: "node_action"; readonly nodeId: string; readonly action: string }
  | { readonly kind: "internal" }
  | { readonly kind: "not_found" };

const SANDBOX_PATH = /^\/(?:v2\/)?sandboxes\/([^/]+)(?:\/(.*))?$/;
const NODE_ACTION = /^\/nodes\/([^/]+)\/([a-z]+)$/;
const TEMPLATE_PATH = /^\/(?:v[23]\/)?templates(?:\/|$)/;
const SIGNED_UPLOAD = /^\/templates\/[^/]+\/files\/[^/]+$/;
const VOLUME_PATH = /^\/(volumes|volumecontent)(?:\/|$)/;
const SNAPSHOT_FORK = /^\/snapshots\/[^/]+\/fork$/;
/** A team's secrets and lifecycle events: rows of the shared catalog, not of one node. */
const TEAM_CATALOG_PATH = /^\/(?:secrets|events)(?:\/|$)/;

export function isProxyRequest(req: IncomingMessage, domain: string | undefined): boolean {
  return req.headers["e2b-sandbox-id"] !== undefined || isSandboxHost(req.headers.host, domain);
}

export function classify(req: IncomingMessage, domain: string | undefined): GatewayRoute {
  // Refused before anything else: no client has a reason to make its routing hop-by-hop.
  const names = connectionNamesRouting(req.rawHeaders);
  if (names.length > 0) return { kind: "routing_hop", names, proxy: isProxyRequest(req, domain) };
  if (isProxyRequest(req, domain)) {
    const target = parseTarget({
      host: req.headers.host,
      sandboxId: header(req, "e2b-sandbox-id"),
      sandboxPort: header(req, "e2b-sandbox-port"),
      domain,
    });
    return target.ok
      ? { kind: "proxy", sandboxId: target.target.sandboxId }
      : { kind: "proxy_invalid", message: target.message };
  }
  const method = req.method ?? "GET";
  const path = requestUrl(req).pathname;
  // The nodes' internal API is the gateway's own to call: never relayed, whatever the route.
  if (isInternalPath(path)) return { kind: "internal" };
  if (path === "/health") return { kind: "health" };
  if (path === "/sandboxes" || path === "/v2/sandboxes") {
    if (method === "POST") return { kind: "create" };
    if (method === "GET") return { kind: "list", version: path === "/sandboxes" ? 1 : 2 };
    return { kind: "not_found" };
  }
  if (path === "/sandboxes/metrics" && method === "GET") return { kind: "metrics" };
  const sandbox = SANDBOX_PATH.exec(path);
  if (sandbox) {
    return {
      kind: "sandbox",
      sandboxId: decodeURIComponent(sandbox[1] ?? ""),
      action: sandbox[2] ?? "",
    };
  }
  if (path === "/snapshots" && method === "GET") return { kind: "snapshots" };
  // A stored snapshot's fork: its children start on the node it is relayed to (the template
  // node), its capture fetched from the shared store.
  if (SNAPSHOT_FORK.test(path) && method === "POST") {
    return { kind: "templates", signedUpload: false };
  }
  if (TEMPLATE_PATH.test(path)) {
    // The upload link the build API hands out carries its own signature, not the API key.
    return { kind: "templates", signedUpload: method === "PUT" && SIGNED_UPLOAD.test(path) };
  }
  const volume = VOLUME_PATH.exec(path);
  // Any node serves any volume (shared catalog, shared storage): they go where templates go.
  if (volume) return { kind: "volumes", content: volume[1] === "volumecontent" };
  // Shared catalog: any node answers for any team's secrets and events (every node's).
  if (TEAM_CATALOG_PATH.test(path)) return { kind: "team_catalog" };
  if (path === "/nodes" && method === "GET") return { kind: "nodes" };
  const node = NODE_ACTION.exec(path);
  if (node && method === "POST") {
    return {
      kind: "node_action",
      nodeId: decodeURIComponent(node[1] ?? ""),
      action: node[2] ?? "",
    };
  }
  return { kind: "not_found" };
}

/**
 * The request's path and query as the gateway relays them (`requestPath`), parsed: a path
 * starting `//` stays a path (a base URL would read it as a host), so what is judged here
 * is what a node gets.
 */
export function requestUrl(req: IncomingMessage): URL {
  return new URL(`http://gateway${requestPath(req.url) ?? "/"}`);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
