import { readFile } from "node:fs/promises";
import { rootCertificates } from "node:tls";
import { type GateInterception, SecretHostRefusedError } from "../network/index.js";
import type { Secrets } from "../secrets/index.js";
import { WarrenError } from "../shared/index.js";
import type { EgressCa } from "../tls/index.js";

/**
 * What the egress gates of this node need for `network.rules`: certificates from the node's
 * egress CA, the roots upstream servers are checked against (Node's, plus
 * WARREN_EGRESS_TRUSTED_CA's), and the teams' secrets.
 */
export async function egressInterception(
  ca: EgressCa,
  secrets: Secrets,
  trustedCaFile: string | undefined,
): Promise<GateInterception> {
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
    contextFor: (name) => ca.contextFor(name),
    ...(upstreamCa && { upstreamCa }),
    secretValue: (team, name, host) =>
      secrets.valueOf(team, name, host).catch((err: unknown) => {
        if (err instanceof WarrenError && err.reason === "not_found") return undefined;
        if (err instanceof WarrenError && err.reason === "secret_host_refused") {
          throw new SecretHostRefusedError(name, host);
        }
        throw err;
      }),
  };
}
