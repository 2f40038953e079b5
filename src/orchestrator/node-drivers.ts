import type { Catalog } from "../catalog/index.js";
import type { GuestArtifacts } from "../host-setup/index.js";
import type { SlotPool } from "../network/index.js";
import type { VmmDriver } from "../vmm/index.js";
import type { GuestAgent } from "./guest/guest-agent.js";
import type { StateLayout } from "./layout.js";

/**
 * What the orchestrator drives, each through its interface (constructed by `server/`): the
 * one bag its parts that start VMs share — the sandboxes' VMs, the warm pool, template boots.
 */
export interface NodeDrivers {
  readonly catalog: Catalog;
  readonly driver: VmmDriver;
  readonly slots: SlotPool;
  /** envd inside each VM. */
  readonly agent: GuestAgent;
  /** The guest kernel, initramfs, agent drive and base rootfs host setup made. */
  readonly images: GuestArtifacts;
  readonly layout: StateLayout;
}
