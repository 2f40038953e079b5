import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { loadAddon } from "../../shared/load-addon.js";
import { VmmError } from "../errors.js";

const KSM = "/sys/kernel/mm/ksm";
/**
 * Pages ksmd scans per 20 ms wake-up: ~200 MB/s, so 150 idle sandboxes (~6 GiB to compare)
 * level off within a few minutes (240 s in the bench); the kernel's default of 100 takes ten
 * times longer.
 */
const KSM_PAGES_TO_SCAN = 1_000;

interface MemMergeAddon {
  setMemoryMerge(on: boolean): void;
}

let addon: MemMergeAddon | undefined;

function memMerge(): MemMergeAddon {
  addon ??= loadAddon<MemMergeAddon>("memmerge", import.meta.url);
  return addon;
}

/**
 * Runs `start` (which spawns a process synchronously, as child_process.spawn does) with
 * KSM merging on for this process, so the child inherits it for all of its memory; this
 * process itself stays out of it.
 */
export function spawnMergeable<T>(start: () => T): T {
  const merge = memMerge();
  merge.setMemoryMerge(true);
  try {
    return start();
  } finally {
    merge.setMemoryMerge(false);
  }
}

/** Starts the kernel's same-page merging daemon (a host-wide switch; left on at exit). */
export async function enableKsm(): Promise<void> {
  try {
    await writeFile(join(KSM, "run"), "1");
    const scan = Number((await readFile(join(KSM, "pages_to_scan"), "utf8")).trim());
    if (scan < KSM_PAGES_TO_SCAN)
      await writeFile(join(KSM, "pages_to_scan"), String(KSM_PAGES_TO_SCAN));
  } catch (err) {
    throw new VmmError(`cannot start KSM (${KSM}): ${(err as Error).message}`, undefined, {
      cause: err,
    });
  }
  memMerge(); // fail at start, not at the first spawn, if the addon is missing
}
