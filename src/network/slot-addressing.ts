import { WarrenError } from "../shared/index.js";
import { cidrSize, formatIpv4, type Ipv4Cidr, parseCidr } from "./ipv4.js";
import { DEFAULT_SLOT_NAMES, type SlotNames } from "./slot-names.js";

/** The tap QEMU opens in each slot's namespace; it carries the guest's gateway address and MAC. */
export const TAP_NAME = "tap0";
/** Name of the veth end inside each slot's namespace. */
export const NETNS_VETH = "eth0";
export const DEFAULT_BASE_CIDR = "10.201.0.0/16";

/** Where one slot lives: names and the /31 its veth pair sits on. */
export interface SlotAddresses {
  readonly index: number;
  /** Network namespace name, `<netnsPrefix><index>` (`warren-<index>` by default). */
  readonly netns: string;
  /** Its bind mount, for `nsenter --net=` or setns(2). */
  readonly netnsPath: string;
  /** Host end of the veth pair, `<hostVethPrefix><index>` (`wv<index>` by default). */
  readonly hostVeth: string;
  /** The slot's host rules are commented `<ruleTag>:<index>` (`warren:<index>` by default). */
  readonly ruleTag: string;
  /** Address of the host end (even address of the /31). */
  readonly hostVethAddress: string;
  /**
   * Address of the namespace end (odd address of the /31): where the host reaches the guest.
   * Traffic to it is DNATed to the guest address inside the namespace.
   */
  readonly hostAddress: string;
}

/** Parses and checks the block slots are carved from. */
export function parseBaseCidr(text: string): Ipv4Cidr {
  const cidr = parseCidr(text);
  if (!cidr || !text.includes("/") || cidr.prefix < 8 || cidr.prefix > 30) {
    throw new WarrenError(
      "invalid_argument",
      `baseCidr must be an IPv4 block from /8 to /30 (e.g. ${DEFAULT_BASE_CIDR}), got "${text}"`,
    );
  }
  return cidr;
}

/** Highest usable slot index in a base block: one /31 per index, index 0 left unused. */
export function maxSlotIndex(base: Ipv4Cidr): number {
  return cidrSize(base) / 2 - 1;
}

export function slotAddresses(
  base: Ipv4Cidr,
  index: number,
  names: SlotNames = DEFAULT_SLOT_NAMES,
): SlotAddresses {
  if (!Number.isInteger(index) || index < 1 || index > maxSlotIndex(base)) {
    throw new WarrenError(
      "invalid_argument",
      `slot index ${index} is outside 1..${maxSlotIndex(base)} for the base block`,
    );
  }
  const even = base.address + index * 2;
  return {
    index,
    netns: `${names.netnsPrefix}${index}`,
    netnsPath: `/run/netns/${names.netnsPrefix}${index}`,
    hostVeth: `${names.hostVethPrefix}${index}`,
    ruleTag: names.ruleTag,
    hostVethAddress: formatIpv4(even),
    hostAddress: formatIpv4(even + 1),
  };
}
