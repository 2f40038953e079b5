import { system } from "./native/system.js";

/** envd corrects the guest clock when it is behind by more than this... */
const MAX_BEHIND_MS = 50;
/** ...or ahead by more than this (the request's own latency makes the guest look ahead). */
const MAX_AHEAD_MS = 5_000;

export function clockNeedsSetting(hostMs: number, guestMs: number): boolean {
  return hostMs - guestMs > MAX_BEHIND_MS || guestMs - hostMs > MAX_AHEAD_MS;
}

export type ClockSetter = (epochMs: number) => void;

/** Sets CLOCK_REALTIME (clock_settime, in process: spawning `date` costs ~0.5 s under TCG). */
export const setSystemClock: ClockSetter = (epochMs) => system().setRealtime(epochMs);
