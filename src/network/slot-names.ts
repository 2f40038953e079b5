import { WarrenError } from "../shared/index.js";

/**
 * The names one pool gives what it creates on the host. Stale cleanup and rule discovery
 * match only these, so two pools with different names (a developer's server and a test
 * run, say) never touch each other's slots.
 */
export interface SlotNames {
  /** Slot `n`'s network namespace is `<netnsPrefix><n>`. */
  readonly netnsPrefix: string;
  /** Host end of slot `n`'s veth pair is `<hostVethPrefix><n>`: at most 15 characters in all. */
  readonly hostVethPrefix: string;
  /** Slot `n`'s rules in the host's tables carry the comment `<ruleTag>:<n>`. */
  readonly ruleTag: string;
}

/** The names Warren has always used: `warren-<n>`, `wv<n>`, `warren:<n>`. */
export const DEFAULT_SLOT_NAMES: SlotNames = Object.freeze({
  netnsPrefix: "warren-",
  hostVethPrefix: "wv",
  ruleTag: "warren",
});

/** The network prefix of a default server: it stands for DEFAULT_SLOT_NAMES. */
export const DEFAULT_NETWORK_PREFIX = "warren";

/** Longest network prefix: its veths, `<prefix>v<n>`, must fit 15 characters with 5–7 digits. */
const PREFIX_PATTERN = /^[a-z][a-z0-9]{1,7}$/;

/**
 * The names of a server's slots from one short prefix (the WARREN_NETWORK_PREFIX setting):
 * namespaces `<prefix>-<n>`, host veths `<prefix>v<n>`, rules commented `<prefix>:<n>`.
 * The default prefix keeps Warren's historic names (veths `wv<n>`, not `warrenv<n>`).
 * Distinct prefixes give disjoint names: each name is the prefix, a fixed non-digit, then
 * digits, so no name of one prefix reads as a slot of another.
 */
export function slotNamesFor(prefix: string): SlotNames {
  if (prefix === DEFAULT_NETWORK_PREFIX) return DEFAULT_SLOT_NAMES;
  if (!PREFIX_PATTERN.test(prefix)) {
    throw new WarrenError(
      "invalid_argument",
      `network prefix must be 2 to 8 lowercase letters and digits, starting with a letter, got "${prefix}"`,
    );
  }
  return { netnsPrefix: `${prefix}-`, hostVethPrefix: `${prefix}v`, ruleTag: prefix };
}

/** Longest interface name Linux accepts (IFNAMSIZ less the NUL). */
export const MAX_INTERFACE_NAME = 15;

/**
 * Checks each name against what the host accepts and what keeps pools apart, naming the
 * option at fault. `maxIndex` is the highest slot index the base block allows (its veth
 * name is the longest).
 */
export function validateSlotNames(names: SlotNames, maxIndex: number): SlotNames {
  // Not ending in a digit: `<prefix><n>` must split back into prefix and index one way only.
  const prefixPattern = /^[A-Za-z0-9_.-]*[A-Za-z_.-]$/;
  if (names.netnsPrefix.length > 64 || !prefixPattern.test(names.netnsPrefix)) {
    throw new WarrenError(
      "invalid_argument",
      `netnsPrefix must be 1 to 64 letters, digits, "-", "_" or "." and not end in a digit, got "${names.netnsPrefix}"`,
    );
  }
  if (!/^[A-Za-z][A-Za-z0-9_-]*$/.test(names.hostVethPrefix) || /\d$/.test(names.hostVethPrefix)) {
    throw new WarrenError(
      "invalid_argument",
      `hostVethPrefix must start with a letter, hold only letters, digits, "-" or "_" and not end in a digit, got "${names.hostVethPrefix}"`,
    );
  }
  const longest = `${names.hostVethPrefix}${maxIndex}`;
  if (longest.length > MAX_INTERFACE_NAME) {
    throw new WarrenError(
      "invalid_argument",
      `hostVethPrefix "${names.hostVethPrefix}" is too long: the last slot's veth "${longest}" has ${longest.length} characters, Linux allows ${MAX_INTERFACE_NAME} (use a shorter prefix or a smaller baseCidr)`,
    );
  }
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(names.ruleTag)) {
    throw new WarrenError(
      "invalid_argument",
      `ruleTag must be 1 to 64 letters, digits, "-", "_" or ".", got "${names.ruleTag}"`,
    );
  }
  return Object.freeze({ ...names });
}

/** The slot index in `name` when it is exactly `<prefix><digits>`; undefined otherwise. */
export function slotIndexIn(prefix: string, name: string): number | undefined {
  if (!name.startsWith(prefix)) return undefined;
  const digits = name.slice(prefix.length);
  return /^[0-9]+$/.test(digits) ? Number(digits) : undefined;
}
