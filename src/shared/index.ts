export { AsyncQueue } from "./async-queue.js";
export {
  ERROR_KINDS,
  ERROR_REASONS,
  type ErrorKind,
  type ErrorReason,
  errorReasonsTable,
  kindOf,
  toWarrenError,
  WarrenError,
} from "./errors.js";
export { type Logger, silentLogger } from "./logger.js";
