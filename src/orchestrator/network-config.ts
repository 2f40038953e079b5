import type { EgressPolicy } from "../network/index.js";
import type { SandboxNetwork } from "./types.js";

/** The slot's egress policy for a sandbox's network settings. */
export function egressPolicyOf(
  network: SandboxNetwork,
  allowInternetAccess: boolean,
): EgressPolicy {
  return {
    allowInternet: allowInternetAccess,
    allowOut: [...network.allowOut],
    denyOut: [...network.denyOut],
  };
}
