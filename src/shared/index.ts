export { AsyncQueue } from "./async-queue.js";
export { ERROR_KINDS, type ErrorKind, toWarrenError, WarrenError } from "./errors.js";
export { type Logger, silentLogger } from "./logger.js";
