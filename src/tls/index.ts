export { ensureLocalCertificate, type LocalCertificate, renewalDue } from "./local-ca.js";
export {
  CertificateKeeper,
  type CertificateKeeperOptions,
  type CertificateSource,
  loadCertificateFiles,
  type TlsIdentity,
} from "./tls-identity.js";
