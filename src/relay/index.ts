export {
  type ApiErrorBody,
  apiError,
  apiErrorBody,
  apiErrorEntry,
  type ErrorAnswer,
  type ProxyErrorBody,
  proxyRefusal,
  retryAfterSeconds,
} from "./error-answer.js";
export {
  connectionNamesRouting,
  type Forwarding,
  forwardingOf,
  isRoutingHeader,
  type RelayHeaderOptions,
  relayRequestHeaders,
  relayResponseHeaders,
} from "./headers.js";
export { rawResponseHead } from "./raw-response.js";
export type { Cut, RelayObserver, RelayOptions, RelayOutcome } from "./relay-options.js";
export { type RequestRelayOptions, relayRequest } from "./relay-request.js";
export { relayUpgrade } from "./relay-upgrade.js";
export { requestPath } from "./request-target.js";
export { sendError, writeSocketError } from "./send-error.js";
export {
  BAD_HEAD,
  DEFAULT_MAX_RESPONSE_HEAD_BYTES,
  errorCode,
  HEAD_TIMEOUT,
  readWhole,
  type Upstream,
  type UpstreamLimits,
  upstreamRequest,
} from "./upstream.js";
