import type { Logger } from "../../shared/index.js";
import type { EgressPolicy } from "../egress-policy.js";
import { hostEgressLimits } from "../host-info.js";
import { parseCidr } from "../ipv4.js";
import type { EgressLimits } from "../netns-rules.js";
import type { Resolve } from "./decide.js";
import { EgressGate } from "./egress-gate.js";
import type { GateInterception } from "./intercept.js";

/** The slot a gate serves: where it listens, and the block whose addresses it never opens. */
export interface GateSlot {
  /** The slot's namespace (`ip netns` name): its gate listens there, on `gateway`. */
  readonly netns: string;
  readonly gateway: string;
  /** The slots' block (CIDR): with the host's own addresses, what no policy opens. */
  readonly base: string;
}

/** A slot's gate, wherever it runs. */
export interface OpenGate {
  /** A new policy: later connections are judged by it, open ones it refuses are cut. */
  update(policy: EgressPolicy): Promise<void>;
  close(): Promise<void>;
}

/**
 * Where slots' egress gates run. On a node: the guest services process (src/guest-services),
 * which parses what guests and upstreams send so the server never does. `inProcessGates`:
 * in the caller's process (the network tier's tests, a pool used on its own).
 */
export interface GateHost {
  open(slot: GateSlot, policy: EgressPolicy): Promise<OpenGate>;
}

export interface InProcessGatesOptions {
  readonly resolve: Resolve;
  readonly interception?: GateInterception;
  readonly logger?: Logger;
}

/** Gates in this process, listening in each slot's namespace. */
export function inProcessGates(options: InProcessGatesOptions): GateHost {
  return {
    open: (slot, policy) =>
      EgressGate.open(
        {
          netns: slot.netns,
          gateway: slot.gateway,
          limits: () => slotLimits(slot.base),
          resolve: options.resolve,
          ...(options.interception && { interception: options.interception }),
          ...(options.logger && { logger: options.logger }),
        },
        policy,
      ),
  };
}

/** What no policy opens for a slot of `base`, now (the host's addresses change). */
export function slotLimits(base: string): EgressLimits {
  const block = parseCidr(base);
  if (!block) throw new Error(`not an IPv4 CIDR: ${base}`);
  return hostEgressLimits(block);
}
