import { resolve } from "node:path";
import type { Command } from "commander";
import { usage } from "../errors.js";

/**
 * The cluster's certificates (docs/cluster.md, "Certificates"), loaded by these commands only
 * (its x509 library is not needed by any other).
 */
function loadTls() {
  return import("../../tls/index.js");
}

/**
 * `warren cluster init-ca|issue`: the cluster CA gateways and nodes recognise each other by,
 * kept by the operator (never on a node, never in the database), and a certificate for each
 * node and gateway, written as the directory its WARREN_CLUSTER_TLS_DIR names.
 */
export function clusterCommands(program: Command): void {
  const cluster = program
    .command("cluster")
    .description("the cluster's certificates: a CA, and one certificate per node and gateway");

  cluster
    .command("init-ca")
    .description("make the cluster CA in <dir> (ca.crt, ca.key 0600); keep ca.key off the nodes")
    .argument("<dir>", "where the CA goes; refused if one is there")
    .action(async (dir: string) => {
      const { createClusterCa } = await loadTls();
      const made = await createClusterCa(resolve(dir));
      process.stdout.write(
        `cluster CA: ${made.certFile} (give it to every node and gateway)\n` +
          `its key:    ${made.keyFile} (keep it where you issue certificates, nowhere else)\n`,
      );
    });

  cluster
    .command("issue")
    .description(
      "issue a node's or a gateway's certificate into <out> (ca.crt, node.* or gateway.*): its WARREN_CLUSTER_TLS_DIR",
    )
    .argument("<ca-dir>", "the cluster CA's directory (init-ca)")
    .option("--node <id>", "for the node with this WARREN_NODE_ID")
    .option("--gateway [name]", "for a gateway (a name for logs; default gateway)")
    .requiredOption("--out <dir>", "where the files go (made 0700; issuing again renews them)")
    .option("--days <n>", "validity in days", "365")
    .action(async (caDir: string, opts) => {
      const node = opts.node as string | undefined;
      const gateway = opts.gateway as string | true | undefined;
      if ((node === undefined) === (gateway === undefined)) {
        throw usage("say whom the certificate is for: --node <id> or --gateway [name]");
      }
      const days = Number(opts.days);
      if (!Number.isInteger(days) || days < 1) throw usage("--days wants a whole number ≥ 1");
      const identity =
        node !== undefined
          ? { role: "node" as const, name: node }
          : { role: "gateway" as const, name: gateway === true ? "gateway" : (gateway as string) };
      const { issueClusterCertificate, identityUri } = await loadTls();
      const issued = await issueClusterCertificate({
        caDir: resolve(caDir),
        outDir: resolve(opts.out),
        identity,
        days,
      });
      process.stdout.write(
        `${identityUri(identity)} until ${issued.notAfter.toISOString()}:\n` +
          `  ${issued.certFile}\n  ${issued.keyFile} (0600)\n  ${issued.caFile}\n` +
          `copy ${resolve(opts.out)} to the ${identity.role}'s WARREN_CLUSTER_TLS_DIR (default /etc/warren/cluster)\n`,
      );
    });
}
