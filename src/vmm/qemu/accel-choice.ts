import { mkdir, readFile, writeFile } from "node:fs/promises";
import { release } from "node:os";
import { dirname } from "node:path";
import type { Accelerator } from "../driver.js";
import { type AccelProbeResult, probeAccelerator } from "./accel.js";

export interface AccelChoice extends AccelProbeResult {
  /** How it was decided: configured, probed now, or a probe cached for this host. */
  readonly source: "config" | "probe" | "cache";
}

export interface AccelChoiceOptions {
  /** Configured accelerator; "auto" (or unset) probes. */
  readonly configured?: Accelerator | "auto";
  readonly kernel: string;
  readonly initramfs: string;
  readonly qemuVersion: string;
  /** Where the probe result is kept, e.g. `<data dir>/accel.json`. */
  readonly cacheFile: string;
}

interface CachedProbe {
  readonly key: string;
  readonly result: AccelProbeResult;
}

/**
 * Picks the accelerator once per host: the configured one, else a probe cached for this
 * host kernel, QEMU and guest kernel, else a fresh time-boxed probe (then cached).
 */
export async function chooseAccelerator(options: AccelChoiceOptions): Promise<AccelChoice> {
  if (options.configured && options.configured !== "auto") {
    return {
      accel: options.configured,
      reason: "set in configuration",
      probeMs: 0,
      source: "config",
    };
  }
  const key = [release(), options.qemuVersion, options.kernel].join("|");
  const cached = await readFile(options.cacheFile, "utf8")
    .then((text) => JSON.parse(text) as CachedProbe)
    .catch(() => undefined);
  if (cached?.key === key) return { ...cached.result, source: "cache" };
  const result = await probeAccelerator(options.kernel, options.initramfs);
  await mkdir(dirname(options.cacheFile), { recursive: true });
  await writeFile(
    options.cacheFile,
    `${JSON.stringify({ key, result } satisfies CachedProbe, null, 2)}\n`,
  );
  return { ...result, source: "probe" };
}
