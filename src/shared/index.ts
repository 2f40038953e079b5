export { AsyncQueue } from "./async-queue.js";
export { type ReadBoundedOptions, readBounded } from "./bounded-body.js";
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
export { type FileOperation, fileSignature } from "./file-signature.js";
export {
  GUEST_HEAD_MAX_BYTES,
  type GuestReply,
  type GuestRequest,
  guestRequest,
} from "./guest-request.js";
export { type Logger, silentLogger } from "./logger.js";
export { DEFAULT_OWNER, Quota } from "./quota.js";
export {
  formatCommand,
  type ProgramOutcome,
  type RunProgramOptions,
  runProgram,
} from "./run-program.js";
