import { readFile } from "node:fs/promises";
import { rootCertificates } from "node:tls";
import type { GateSupplies } from "../guest-services/index.js";
import { SecretHostRefusedError } from "../network/index.js";
import type { Secrets } from "../secrets/index.js";
import { WarrenError } from "../shared/index.js";
import type { EgressCa } from "../tls/index.js";

/**
 * What the egress gates of this node get from the server (they run in the guest services
 * process, which holds neither the CA's key nor the secrets): WARREN_EGRESS_RESOLVER, the
 * roots upstream servers are checked against (Node's, plus WARREN_EGRESS_TRUSTED_CA's), and
 * for `network.rules` certificates of the node's egress CA and the teams' secrets.
 */
export async function egressSupplies(
  ca: EgressCa,
  secrets: Secrets,
  config: { readonly egressTrustedCa?: string; readonly egressResolver?: string },
): Promise<GateSupplies> {
  const trustedCaFile = config.egressTrustedCa;
  let upstreamCa: readonly string[] | undefined;
  if (trustedCaFile !== undefined) {
    const extra = await readFile(trustedCaFile, "utf8").catch((err: NodeJS.ErrnoException) => {
      throw new WarrenError(
        "invalid_argument",
        `WARREN_EGRESS_TRUSTED_CA: cannot read ${trustedCaFile} (${err.code})`,
      );
    });
    if (!extra.includes("-----BEGIN CERTIFICATE-----")) {
      throw new WarrenError(
        "invalid_argument",
        `WARREN_EGRESS_TRUSTED_CA: ${trustedCaFile} holds no PEM certificate`,
      );
    }
    upstreamCa = [...rootCertificates, extra];
  }
  return {
    ...(config.egressResolver && { resolver: config.egressResolver }),
    ...(upstreamCa && { upstreamCa }),
    rules: {
      leafFor: (name) => ca.leafFor(name),
      secretValue: (team, name, host) =>
        secrets.valueOf(team, name, host).catch((err: unknown) => {
          if (err instanceof WarrenError && err.reason === "not_found") return undefined;
          if (err instanceof WarrenError && err.reason === "secret_host_refused") {
            throw new SecretHostRefusedError(name, host);
          }
          throw err;
        }),
    },
  };
}
