import {
  type EgressPolicy,
  type HeaderRule,
  secretsNamed,
  validateHeaderRules,
} from "../../network/index.js";
import type { NetworkUpdate, SandboxNetwork, SandboxNetworkRules } from "../types.js";
import type { SandboxConfig } from "./live-sandbox.js";

/** The slot's egress policy for a sandbox's network settings; `teamId`'s secrets fill its rules. */
export function egressPolicyOf(
  config: { readonly network: SandboxNetwork; readonly allowInternetAccess: boolean },
  teamId: string,
): EgressPolicy {
  const { network } = config;
  return {
    allowInternet: config.allowInternetAccess,
    allowOut: [...network.allowOut],
    denyOut: [...network.denyOut],
    headerRules: headerRulesOf(network.rules ?? {}),
    secretsOf: teamId,
  };
}

/**
 * Throws EgressPolicyError (a 400) naming what is wrong in E2B-shaped rules; else each
 * secret they name, with the domain it would be sent to.
 */
export function checkNetworkRules(
  rules: SandboxNetworkRules,
): { readonly domain: string; readonly secret: string }[] {
  return secretsNamed(validateHeaderRules(headerRulesOf(rules)));
}

/** E2B's rules as the gate takes them: a domain's rules' headers in order, later ones winning. */
function headerRulesOf(rules: SandboxNetworkRules): HeaderRule[] {
  return Object.entries(rules).map(([domain, list]) => ({
    domain,
    headers: list.flatMap((rule) => Object.entries(rule?.transform?.headers ?? {})),
  }));
}

/** The config after PUT /sandboxes/{id}/network: each field given replaces the old one. */
export function withNetworkUpdate(config: SandboxConfig, update: NetworkUpdate): SandboxConfig {
  const { rules: _old, ...network } = config.network;
  const rules = update.rules && Object.keys(update.rules).length > 0 ? update.rules : undefined;
  return {
    ...config,
    network: {
      ...network,
      allowOut: update.allowOut ?? config.network.allowOut,
      denyOut: update.denyOut ?? config.network.denyOut,
      ...(rules && { rules }),
    },
    allowInternetAccess: update.allowInternetAccess ?? config.allowInternetAccess,
  };
}
