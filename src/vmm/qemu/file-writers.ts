import type { FileHandle } from "node:fs/promises";
import { loadAddon } from "../../shared/load-addon.js";
import { SnapshotTamperedError } from "../errors.js";

interface FileLeaseAddon {
  openForWriting(fd: number): boolean;
}

let addon: FileLeaseAddon | undefined;

function fileLease(): FileLeaseAddon {
  addon ??= loadAddon<FileLeaseAddon>("filelease", import.meta.url);
  return addon;
}

/**
 * How long a disk may stay open for writing before it is refused: a paused VMM is killed
 * without waiting, and lets go of its overlay only once the kernel has torn down its memory.
 */
const WRITERS_GONE_MS = 10_000;

/**
 * Waits until no process holds the file open in `handle` (read-only) for writing, nor maps
 * it shared and writable; refuses it when one still does after `timeoutMs`. A sealed file is
 * root's and read-only, so no one can open it for writing any more: once no writer is left,
 * none comes back, and what is read from it now is what QEMU reads when it opens it. A VMM
 * that kept a writable descriptor on its overlay past a fork capture (a well-behaved QEMU
 * reopens it read-only) could otherwise rewrite a header between its check and its use; a
 * paused VMM that was killed but has not exited yet still holds its overlay for a moment.
 */
export async function awaitNoWriters(
  handle: FileHandle,
  path: string,
  timeoutMs = WRITERS_GONE_MS,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    let writers: boolean;
    try {
      writers = fileLease().openForWriting(handle.fd);
    } catch (err) {
      throw new SnapshotTamperedError(
        `${path}: cannot tell whether another process writes it (${(err as Error).message})`,
      );
    }
    if (!writers) return;
    if (performance.now() > deadline)
      throw new SnapshotTamperedError(
        `${path} is open for writing by another process (a VMM kept it): it is not used until no one writes it`,
      );
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
