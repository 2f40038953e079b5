import type { Slot } from "../network/index.js";
import type { GuestImages, MachineShape, VmSpec } from "../vmm/index.js";

export interface GuestSpecInput {
  readonly id: string;
  readonly slot: Pick<Slot, "netns" | "tapName" | "guestAddress" | "gateway">;
  readonly images: GuestImages & { readonly baseRootfs: string };
  readonly shape: MachineShape & { readonly diskSizeMiB?: number };
  readonly runtimeDir: string;
}

/** A VM in a network slot: tap NIC, and the slot's fixed guest address on the command line. */
export function guestSpec(input: GuestSpecInput): VmSpec {
  const { id, slot, images, shape, runtimeDir } = input;
  return {
    id,
    shape,
    images,
    baseDisk: images.baseRootfs,
    network: { kind: "tap", netns: slot.netns, tap: slot.tapName },
    runtimeDir,
    guestIp: `${slot.guestAddress}/30`,
    guestGateway: slot.gateway,
  };
}
