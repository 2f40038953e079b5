export type { ProxyErrorBody } from "./respond.js";
export { SandboxProxy, type SandboxProxyOptions } from "./sandbox-proxy.js";
export { type ProxyTarget, parseTarget, type TargetInput, type TargetResult } from "./target.js";
