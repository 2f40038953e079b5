import { spawnSync } from "node:child_process";

/** envd corrects the guest clock when it is behind by more than this... */
const MAX_BEHIND_MS = 50;
/** ...or ahead by more than this (the request's own latency makes the guest look ahead). */
const MAX_AHEAD_MS = 5_000;

export function clockNeedsSetting(hostMs: number, guestMs: number): boolean {
  return hostMs - guestMs > MAX_BEHIND_MS || guestMs - hostMs > MAX_AHEAD_MS;
}

export type ClockSetter = (epochMs: number) => void;

/** Sets CLOCK_REALTIME through `date`, the one tool every rootfs and the agent drive have. */
export const setSystemClock: ClockSetter = (epochMs) => {
  const seconds = (epochMs / 1000).toFixed(3);
  // GNU date takes fractional seconds; busybox date only whole ones.
  for (const value of [`@${seconds}`, `@${Math.round(epochMs / 1000)}`]) {
    if (spawnSync("date", ["-u", "-s", value], { stdio: "ignore" }).status === 0) return;
  }
  throw new Error("could not set the system clock with date -s");
};
