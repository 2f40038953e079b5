import { type SlotNames, slotNamesFor } from "../../src/network/index.js";

// What one e2e run may use, handed to every test file by the test command (scripts/test.mjs,
// see run-sandbox.ts) through environment variables: a data directory of its own, the
// guest images cache, a network prefix and an IPv4 block no one else on the host uses.
// Servers and slot pools the tests start get these, never Warren's defaults, so a run
// leaves a Warren server on the same host (/var/lib/warren, `warren-<n>`, `wv<n>`,
// `warren:<n>`, 10.201.0.0/16) alone.

/** The environment variables, by what they carry. */
export const RUN_ENV_VARS = {
  dataDir: "WARREN_TEST_DATA_DIR",
  imagesDir: "WARREN_TEST_IMAGES_DIR",
  networkPrefix: "WARREN_TEST_NETWORK_PREFIX",
  networkCidr: "WARREN_TEST_NETWORK_CIDR",
} as const;

export interface RunEnv {
  /** Created for this run (mode 0711), removed when it ends. */
  readonly dataDir: string;
  /** Guest kernel, initramfs, agent drive and base rootfs: a cache kept across runs. */
  readonly imagesDir: string;
  /** Names this run's slots and fixtures (see slotNamesFor); unique on the host. */
  readonly networkPrefix: string;
  /** Block this run's slots are carved from; overlaps no route of the host. */
  readonly networkCidr: string;
}

let cached: RunEnv | undefined;

/** This run's sandbox; throws when the file was not started by the test command. */
export function runEnv(): RunEnv {
  if (cached) return cached;
  const read = (key: keyof typeof RUN_ENV_VARS): string => {
    const value = process.env[RUN_ENV_VARS[key]];
    if (!value) {
      throw new Error(
        `${RUN_ENV_VARS[key]} is not set: run e2e tests through the test command (npm run test:e2e, or node scripts/test.mjs e2e <filter>), which gives each run its own data dir and network names`,
      );
    }
    return value;
  };
  cached = Object.freeze({
    dataDir: read("dataDir"),
    imagesDir: read("imagesDir"),
    networkPrefix: read("networkPrefix"),
    networkCidr: read("networkCidr"),
  });
  return cached;
}

/** The names this run's slot pools and servers use. */
export function runSlotNames(): SlotNames {
  return slotNamesFor(runEnv().networkPrefix);
}

/** NetnsSlotPool options that keep a test's pool inside this run's names and block. */
export function runPoolOptions(): SlotNames & { baseCidr: string } {
  return { ...runSlotNames(), baseCidr: runEnv().networkCidr };
}

/** VMM uids a run's VMs take: 4096 of their own per run (from its unique block), above Warren's default range. */
export const RUN_VMM_UID_COUNT = 4096;

export function runVmmUidBase(): number {
  const [, second = 0, third = 0] = runEnv().networkCidr.split(/[./]/).map(Number);
  return 1_600_000_000 + ((second * 256 + third) % 65_536) * RUN_VMM_UID_COUNT;
}

/** This run's guest id range (WARREN_GUEST_ID_BASE): below the VMM uids, one per block. */
export function runGuestIdBase(): number {
  const [, second = 0, third = 0] = runEnv().networkCidr.split(/[./]/).map(Number);
  return 1_400_000_000 + ((second * 256 + third) % 3_000) * 65_536;
}

/** The server settings of a test server: this run's data dir, images, names, block and uids. */
export function runServerEnv(): Record<string, string> {
  const env = runEnv();
  return {
    WARREN_HOME: env.dataDir,
    WARREN_IMAGES_DIR: env.imagesDir,
    WARREN_NETWORK_PREFIX: env.networkPrefix,
    WARREN_NETWORK_CIDR: env.networkCidr,
    WARREN_VMM_UID_BASE: String(runVmmUidBase()),
    WARREN_VMM_UID_COUNT: String(RUN_VMM_UID_COUNT),
    WARREN_GUEST_ID_BASE: String(runGuestIdBase()),
    // Pauses let their VMMs go, as the tests of pause and resume expect (what a paused
    // sandbox holds, a restore's path); test/e2e/kept-vmms.test.ts turns keeping on.
    WARREN_PAUSE_KEEP_MS: "0",
    // Its template's capture (a cold boot, kernels started) would load every server start;
    // the code interpreter's own tests turn it on.
    WARREN_CODE_INTERPRETER: "off",
  };
}

/**
 * A host name (namespace or interface) for a test fixture, under this run's prefix so the
 * leak check counts it and nothing else matches it: `<prefix>-<what>` for namespaces,
 * `<prefix><what>` for interfaces (at most 15 characters).
 */
export function fixtureNetns(what: string): string {
  return `${runEnv().networkPrefix}-${what}`;
}

export function fixtureLink(what: string): string {
  const name = `${runEnv().networkPrefix}${what}`;
  if (name.length > 15) throw new Error(`interface name ${name} is over 15 characters`);
  return name;
}
