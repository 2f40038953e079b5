import { loadAddon } from "../../shared/load-addon.js";

interface SystemAddon {
  /** clock_settime(CLOCK_REALTIME); throws with the errno text. */
  setRealtime(epochMs: number): void;
  /** Stops the legacy PIT's channel 0 (see system.c); false without port access. */
  stopPitTimer(): boolean;
}

let addon: SystemAddon | undefined;

export function system(): SystemAddon {
  addon ??= loadAddon<SystemAddon>("system", import.meta.url);
  return addon;
}
