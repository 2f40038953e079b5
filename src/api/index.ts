export {
  type ApiOptions,
  createApi,
  DEFAULT_BODY_LIMIT_BYTES,
  DEFAULT_TIMEOUT_MS,
  MAX_TIMEOUT_MS,
} from "./create-api.js";
