export {
  type ProxyTarget,
  parseTarget,
  type TargetInput,
  type TargetResult,
} from "../protocol/index.js";
export type { ProxyErrorBody } from "../relay/index.js";
export { SandboxProxy, type SandboxProxyOptions } from "./sandbox-proxy.js";
