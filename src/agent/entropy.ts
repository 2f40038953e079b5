import { INIT_SEED_BYTES } from "../protocol/index.js";
import { WarrenError } from "../shared/index.js";
import { system } from "./native/system.js";

/**
 * Applies /init's seed to the guest's randomness. The caller wipes the buffer afterwards.
 * Throwing fails the /init: a clone left with its siblings' random state must not be handed out.
 */
export type EntropySeeder = (seed: Buffer) => void;

/** Standard base64, `=`-padded: Buffer.from would skip what is not base64 and decode the rest. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * /init's `seed`: undefined when absent, else its INIT_SEED_BYTES bytes. The messages never
 * quote the value: it is key material, and refusals travel back to the host, which logs them.
 */
export function parseSeed(value: unknown): Buffer | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" || !BASE64.test(value))
    throw new WarrenError("invalid_argument", "seed must be a string of standard base64");
  const bytes = Buffer.from(value, "base64");
  if (bytes.length !== INIT_SEED_BYTES) {
    bytes.fill(0);
    throw new WarrenError(
      "invalid_argument",
      `seed must be ${INIT_SEED_BYTES} bytes, got ${bytes.length}`,
    );
  }
  return bytes;
}

/**
 * The guest's seeder (envd `--guest`, as root): the kernel first, so that OpenSSL's reseed,
 * which draws from the kernel, gets the new state. A missing OpenSSL is not an error: envd
 * itself draws no randomness, and the sandbox's programs draw theirs from the kernel.
 */
export const seedGuestRandomness: EntropySeeder = (seed) => {
  try {
    system().reseedKernel(seed);
  } catch (err) {
    throw new WarrenError(
      "internal",
      `cannot reseed the guest kernel's random pool: ${(err as Error).message}`,
    );
  }
  system().reseedOpenssl();
};
