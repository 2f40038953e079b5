export { AsyncQueue } from "./async-queue.js";
export {
  describeErrors,
  ERROR_KINDS,
  ERROR_REASONS,
  type ErrorKind,
  type ErrorReason,
  kindOf,
  toWarrenError,
  WarrenError,
} from "./errors.js";
export { type Logger, silentLogger } from "./logger.js";
