import type { EgressPolicy } from "../network/index.js";
import type { SandboxConfig } from "./live-sandbox.js";
import type { NetworkUpdate, SandboxNetwork } from "./types.js";

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

/** The config after PUT /sandboxes/{id}/network: each field given replaces the old one. */
export function withNetworkUpdate(config: SandboxConfig, update: NetworkUpdate): SandboxConfig {
  return {
    ...config,
    network: {
      ...config.network,
      allowOut: update.allowOut ?? config.network.allowOut,
      denyOut: update.denyOut ?? config.network.denyOut,
    },
    allowInternetAccess: update.allowInternetAccess ?? config.allowInternetAccess,
  };
}
