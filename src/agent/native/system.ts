import { loadAddon } from "../../shared/load-addon.js";

interface SystemAddon {
  /** clock_settime(CLOCK_REALTIME); throws with the errno text. */
  setRealtime(epochMs: number): void;
  /** Stops the legacy PIT's channel 0 (see system.c); false without port access. */
  stopPitTimer(): boolean;
  /** RNDADDENTROPY (credited) then RNDRESEEDCRNG; throws with the errno text. Needs CAP_SYS_ADMIN. */
  reseedKernel(seed: Uint8Array): void;
  /** Reseeds this process's OpenSSL DRBG from the kernel; false if it has no OpenSSL RAND_seed. */
  reseedOpenssl(): boolean;
  /**
   * mount(2) with text options and MS_* flags (MS_NOSUID and MS_NODEV only), off the event
   * loop; rejects with the errno text.
   */
  mount(
    source: string,
    target: string,
    fstype: string,
    options: string,
    flags?: number,
  ): Promise<void>;
}

let addon: SystemAddon | undefined;

export function system(): SystemAddon {
  addon ??= loadAddon<SystemAddon>("system", import.meta.url);
  return addon;
}
