export {
  type ProxyTarget,
  parseTarget,
  type TargetInput,
  type TargetResult,
} from "../protocol/index.js";
export type { ProxyErrorBody } from "./respond.js";
export { SandboxProxy, type SandboxProxyOptions } from "./sandbox-proxy.js";
