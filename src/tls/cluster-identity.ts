import type { PeerCertificate, TLSSocket } from "node:tls";

/**
 * Who a cluster certificate names: a node (by its node id, WARREN_NODE_ID) or a gateway (by
 * a name of the operator's choosing). The name is a URI subject alternative name,
 * `warren-node:<id>` or `warren-gateway:<name>`: no host name or address is involved, so a
 * node's certificate stays valid wherever it is reached, and the gateway checks the name
 * against the node row it routes to, not against the URL that row gives.
 */
export type ClusterRole = "node" | "gateway";

export interface ClusterIdentity {
  readonly role: ClusterRole;
  readonly name: string;
}

const SCHEMES: Readonly<Record<ClusterRole, string>> = {
  node: "warren-node",
  gateway: "warren-gateway",
};

/**
 * Names a certificate may carry: what WARREN_NODE_ID accepts (lowercase letters, digits, '.'
 * and '-', up to 63). Nothing that Node would quote in `subjectaltname`.
 */
const NAME = /^[a-z0-9][a-z0-9.-]{0,62}$/;

export function isClusterName(name: string): boolean {
  return NAME.test(name);
}

/** The URI a certificate carries for `identity`, e.g. `warren-node:node-1`. */
export function identityUri(identity: ClusterIdentity): string {
  if (!isClusterName(identity.name)) {
    throw new Error(
      `${JSON.stringify(identity.name)} is no cluster name: lowercase letters, digits, '.' and '-' (up to 63)`,
    );
  }
  return `${SCHEMES[identity.role]}:${identity.name}`;
}

/**
 * The cluster identities in a certificate's subject alternative names (Node's
 * `subjectaltname`, e.g. `URI:warren-node:node-1, DNS:x`). Entries Node quoted (names with
 * separators in them) are none of Warren's: they never match.
 */
export function identitiesIn(subjectAltName: string | undefined): ClusterIdentity[] {
  const found: ClusterIdentity[] = [];
  for (const entry of (subjectAltName ?? "").split(", ")) {
    if (!entry.startsWith("URI:")) continue;
    const uri = entry.slice("URI:".length);
    for (const role of ["node", "gateway"] as const) {
      const prefix = `${SCHEMES[role]}:`;
      const name = uri.startsWith(prefix) ? uri.slice(prefix.length) : undefined;
      if (name !== undefined && isClusterName(name)) found.push({ role, name });
    }
  }
  return found;
}

/** The one identity a certificate names, or undefined when it names none or several. */
export function identityOf(subjectAltName: string | undefined): ClusterIdentity | undefined {
  const found = identitiesIn(subjectAltName);
  return found.length === 1 ? found[0] : undefined;
}

/** The code of a node whose certificate names another node (or none). */
export const MISIDENTIFIED = "ERR_CLUSTER_PEER_MISIDENTIFIED";

/**
 * A TLS client's `checkServerIdentity` for a connection to node `nodeId`: the certificate
 * (already verified against the cluster CA) must name that node, whatever the address.
 * A certificate naming another node, or a gateway, is refused before any byte of the
 * request goes out.
 */
export function expectNode(
  nodeId: string,
  onMismatch?: (presented: string | undefined) => void,
): (host: string, cert: PeerCertificate) => Error | undefined {
  return (_host, cert) => {
    const named = identityOf(cert.subjectaltname);
    if (named?.role === "node" && named.name === nodeId) return undefined;
    onMismatch?.(cert.subjectaltname);
    const err: NodeJS.ErrnoException = new Error(
      `the certificate names ${named ? identityUri(named) : "no cluster member"}, not warren-node:${nodeId}`,
    );
    err.code = MISIDENTIFIED;
    return err;
  };
}

/**
 * The ALPN protocol of a gateway's **control connections**: the ones it opens for its own
 * calls on a node's internal API, never for relaying a client's request. What the internal
 * API trusts is a connection that negotiated it with a gateway's certificate: nothing a
 * client sends through a relay can make the gateway's relay connections negotiate it.
 */
export const CONTROL_ALPN = "warren-control/1";

/** What a gateway opens a connection to a node for: relaying client traffic, or its own calls. */
export type ClusterChannel = "relay" | "control";

/** ALPN a gateway's connection offers, by what it is for. */
export function channelAlpn(channel: ClusterChannel): string[] {
  return channel === "control" ? [CONTROL_ALPN] : ["http/1.1"];
}

/**
 * Whether a connection the cluster listener accepted is a gateway's control connection: a
 * gateway's verified certificate, and `CONTROL_ALPN` negotiated.
 */
export function isControlConnection(socket: unknown): boolean {
  return (
    peerIdentity(socket)?.role === "gateway" &&
    (socket as Partial<TLSSocket>).alpnProtocol === CONTROL_ALPN
  );
}

/**
 * Who is at the other end of a TLS connection the cluster listener accepted: the identity
 * its client certificate names, once verified against the cluster CA; undefined otherwise
 * (no certificate, not verified, not a TLS socket at all).
 */
export function peerIdentity(socket: unknown): ClusterIdentity | undefined {
  const tls = socket as Partial<TLSSocket> | undefined;
  if (tls?.authorized !== true || typeof tls.getPeerCertificate !== "function") return undefined;
  // Null once the connection is gone (a peer that reset at once): no one, never a throw.
  return identityOf(tls.getPeerCertificate()?.subjectaltname);
}
