export {
  CA_FILES,
  createClusterCa,
  DEFAULT_VALIDITY_DAYS,
  type IssuedCertificate,
  type IssueOptions,
  issueClusterCertificate,
  MEMBER_FILES,
} from "./cluster-ca.js";
export {
  type ClusterCredentials,
  clusterClientOptions,
  clusterServerOptions,
  loadClusterCredentials,
} from "./cluster-credentials.js";
export {
  type ClusterChannel,
  type ClusterIdentity,
  type ClusterRole,
  CONTROL_ALPN,
  expectNode,
  identityOf,
  identityUri,
  isClusterName,
  isControlConnection,
  MISIDENTIFIED,
  peerIdentity,
} from "./cluster-identity.js";
export { EGRESS_CA_FILES, EgressCa, type LeafCertificate } from "./egress-ca.js";
export { ensureLocalCertificate, type LocalCertificate, renewalDue } from "./local-ca.js";
export {
  CertificateKeeper,
  type CertificateKeeperOptions,
  type CertificateSource,
  loadCertificateFiles,
  type TlsIdentity,
} from "./tls-identity.js";
