import { WarrenError } from "../shared/index.js";

/** A VMM failed: QEMU would not start, died, or could not snapshot or restore. */
export class VmmError extends WarrenError {
  constructor(
    message: string,
    readonly vmId?: string,
    options?: { cause?: unknown },
  ) {
    super("vmm_failed", vmId ? `vm ${vmId}: ${message}` : message, options);
  }
}

/** QEMU answered a QMP command with an error; names the command that failed. */
export class QmpError extends VmmError {
  constructor(
    readonly command: string,
    readonly errorClass: string,
    readonly description: string,
    vmId?: string,
  ) {
    super(`QMP ${command} failed: ${errorClass}: ${description}`, vmId);
  }
}

/** A snapshot cannot be restored here (accelerator, CPU model, kernel, shape or format differ). */
export class SnapshotMismatchError extends WarrenError {
  constructor(message: string) {
    super("snapshot_incompatible", message);
  }
}

/** A snapshot's files differ from what was sealed at capture: it is never restored. */
export class SnapshotTamperedError extends WarrenError {
  constructor(message: string) {
    super("snapshot_tampered", message);
  }
}
