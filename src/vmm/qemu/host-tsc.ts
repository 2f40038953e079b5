import { readFileSync } from "node:fs";

/**
 * The host's TSC frequency in kHz, from /proc/cpuinfo. Under TCG the guest's TSC ticks at
 * the host's rate, but the guest kernel often fails to calibrate it against the emulated
 * PIT on a busy host, and then hangs at boot; `tsc_early_khz=` tells it instead.
 */
export function hostTscKhz(cpuinfo = readFileSync("/proc/cpuinfo", "utf8")): number | undefined {
  const match = /^cpu MHz\s*:\s*([\d.]+)/m.exec(cpuinfo);
  if (!match?.[1]) return undefined;
  const khz = Math.round(Number(match[1]) * 1000);
  return Number.isFinite(khz) && khz > 0 ? khz : undefined;
}
