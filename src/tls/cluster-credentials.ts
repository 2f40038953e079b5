import { createPrivateKey, X509Certificate } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import {
  type ConnectionOptions,
  createSecureContext,
  type SecureContext,
  type SecureContextOptions,
  type TlsOptions,
} from "node:tls";
import { WarrenError } from "../shared/index.js";
import { CA_FILES, MEMBER_FILES } from "./cluster-ca.js";
import {
  type ClusterChannel,
  type ClusterIdentity,
  type ClusterRole,
  CONTROL_ALPN,
  channelAlpn,
  expectNode,
  identitiesIn,
  identityUri,
} from "./cluster-identity.js";

/** A gateway's or a node's credentials in the cluster, checked as they were loaded. */
export interface ClusterCredentials {
  /** The cluster CA's certificate (PEM): the only authority this member trusts in the cluster. */
  readonly ca: string;
  /** This member's certificate (PEM) and key (PEM). */
  readonly cert: string;
  readonly key: string;
  readonly identity: ClusterIdentity;
  readonly notAfter: Date;
  /** A warning worth logging (the CA's key beside the member's, an expiry near), if any. */
  readonly warnings: readonly string[];
}

const SOON_MS = 30 * 86_400_000;

/**
 * Reads a member's credentials from its WARREN_CLUSTER_TLS_DIR (`ca.crt`, and `node.crt` +
 * `node.key` or `gateway.crt` + `gateway.key`) and checks them before anything listens or
 * connects: the key is the certificate's, the certificate is the cluster CA's, current, and
 * names one member of `role` (a node: `expectName`, its WARREN_NODE_ID). Each failure says
 * what to do.
 */
export async function loadClusterCredentials(
  dir: string,
  role: ClusterRole,
  expectName?: string,
  now: Date = new Date(),
): Promise<ClusterCredentials> {
  const files = MEMBER_FILES[role];
  const read = (name: string) =>
    readFile(join(dir, name), "utf8").catch((err: NodeJS.ErrnoException) => {
      throw problem(
        `cannot read ${join(dir, name)} (${err.code ?? err.message}): issue this ${role}'s certificate ` +
          `with \`warren cluster issue\` and put it in WARREN_CLUSTER_TLS_DIR (docs/cluster.md#certificates)`,
      );
    });
  // Read together, reported in order: with several missing, the first of them, every time.
  const reads = await Promise.allSettled([read(CA_FILES.cert), read(files.cert), read(files.key)]);
  const [ca, cert, key] = reads.map((r) => {
    if (r.status === "rejected") throw r.reason;
    return r.value;
  }) as [string, string, string];
  const caCert = parse(ca, join(dir, CA_FILES.cert));
  const certificate = parse(cert, join(dir, files.cert));
  let matches: boolean;
  try {
    matches = certificate.checkPrivateKey(createPrivateKey(key));
  } catch {
    throw problem(`${join(dir, files.key)} is not a PEM private key`);
  }
  if (!matches) throw problem(`${join(dir, files.key)} is not the key of ${files.cert}`);
  if (!certificate.checkIssued(caCert) || !certificate.verify(caCert.publicKey)) {
    throw problem(`${join(dir, files.cert)} was not issued by the cluster CA in ${CA_FILES.cert}`);
  }
  const notAfter = new Date(certificate.validTo);
  if (notAfter <= now || new Date(certificate.validFrom) > now) {
    throw problem(
      `${join(dir, files.cert)} is valid from ${certificate.validFrom} to ${certificate.validTo}: issue it again`,
    );
  }
  const named = identitiesIn(certificate.subjectAltName);
  const identity = named.length === 1 ? named[0] : undefined;
  if (!identity || identity.role !== role) {
    throw problem(
      `${join(dir, files.cert)} must name one ${role} (URI warren-${role}:<name>); it names ${
        named.map(identityUri).join(", ") || "none"
      }`,
    );
  }
  if (expectName !== undefined && identity.name !== expectName) {
    throw problem(
      `${join(dir, files.cert)} names ${identityUri(identity)}, but this ${role} is ${expectName}: ` +
        `issue it a certificate of its own`,
    );
  }
  const warnings: string[] = [];
  if (await stat(join(dir, CA_FILES.key)).catch(() => undefined)) {
    warnings.push(
      `${join(dir, CA_FILES.key)}: the cluster CA's key belongs with whoever issues certificates, not on a ${role}`,
    );
  }
  if (notAfter.getTime() - now.getTime() < SOON_MS) {
    warnings.push(`${join(dir, files.cert)} expires ${notAfter.toISOString()}: issue it again`);
  }
  return { ca, cert, key, identity, notAfter, warnings };
}

function parse(pem: string, file: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw problem(`${file} is not a PEM certificate`);
  }
}

function problem(message: string): WarrenError {
  return new WarrenError("invalid_argument", `cluster TLS: ${message}`);
}

/** TLS 1.3 only: every end is a Warren of this release. */
const MIN_VERSION = "TLSv1.3";

/**
 * A node's cluster listener: its certificate, and a client certificate from the cluster CA
 * required of every connection (the handshake fails without one). Which member a verified
 * peer is, is `peerIdentity`'s to say.
 */
export function clusterServerOptions(credentials: ClusterCredentials): TlsOptions {
  return {
    ...secureContext(credentials),
    requestCert: true,
    rejectUnauthorized: true,
    minVersion: MIN_VERSION,
    // A gateway's control connections ask for the first, its relay connections the second.
    ALPNProtocols: [CONTROL_ALPN, "http/1.1"],
  };
}

/**
 * A gateway's connection to node `nodeId`: its client certificate, the cluster CA as the
 * only trusted authority, and the node's certificate required to name `nodeId` (whatever
 * address the catalog gave); `channel` says whether it relays client traffic or carries the
 * gateway's own calls on the internal API (`CONTROL_ALPN`). A pool of connections must not resume TLS sessions either
 * (Node checks the name on full handshakes only): see the gateway's NodeAgents.
 */
export function clusterClientOptions(
  credentials: ClusterCredentials,
  nodeId: string,
  onMismatch?: (presented: string | undefined) => void,
  channel: ClusterChannel = "relay",
): ConnectionOptions {
  return {
    secureContext: clientContext(credentials),
    minVersion: MIN_VERSION,
    ALPNProtocols: channelAlpn(channel),
    rejectUnauthorized: true,
    checkServerIdentity: expectNode(nodeId, onMismatch),
    // No SNI: nodes are named by their certificate, not by a host name (and an IP is no SNI).
    servername: "",
  };
}

function secureContext({ ca, cert, key }: ClusterCredentials): SecureContextOptions {
  return { ca, cert, key };
}

const clientContexts = new WeakMap<ClusterCredentials, SecureContext>();

/**
 * One client context per credentials, shared by every connection made with them: given
 * `ca`/`cert`/`key`, Node builds one per connection, parsing them each time. What differs per
 * connection (ALPN, the name check, no SNI) stays in the connection's options.
 */
function clientContext(credentials: ClusterCredentials): SecureContext {
  let context = clientContexts.get(credentials);
  if (!context) {
    context = createSecureContext({ ...secureContext(credentials), minVersion: MIN_VERSION });
    clientContexts.set(credentials, context);
  }
  return context;
}
