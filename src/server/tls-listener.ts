import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import type { Config } from "../shared/config.js";
import { type Logger, WarrenError } from "../shared/index.js";
import { CertificateKeeper, type CertificateSource } from "../tls/index.js";

export interface TlsListener {
  /** The API's address in domain mode, e.g. https://api.sbx.example.com. */
  readonly url: string;
  /** The local CA clients trust (Warren's own certificate only). */
  readonly caFile: string | undefined;
  close(): Promise<void>;
}

/**
 * Domain mode's HTTPS listener on WARREN_TLS_PORT: the same request and upgrade handlers as
 * the plain one (the Host says API or sandbox port), with the operator's certificate or one
 * from Warren's local CA, swapped in place when it is renewed or replaced.
 */
export async function listenTls(
  config: Readonly<Config>,
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
  onUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void,
  log: Logger,
): Promise<TlsListener | undefined> {
  const domain = config.domain;
  if (!domain || config.tlsPort === "off") return undefined;
  if ((config.tlsCert === undefined) !== (config.tlsKey === undefined)) {
    throw new WarrenError(
      "invalid_argument",
      "WARREN_TLS_CERT and WARREN_TLS_KEY go together: set both (your certificate) or neither (Warren's local CA)",
    );
  }
  const source: CertificateSource =
    config.tlsCert && config.tlsKey
      ? { kind: "files", certFile: config.tlsCert, keyFile: config.tlsKey }
      : { kind: "local-ca", dir: join(config.dataDir, "tls") };
  let server: ReturnType<typeof createServer> | undefined;
  const keeper = await CertificateKeeper.start({
    source,
    domain,
    logger: log,
    onChange: (identity) => server?.setSecureContext({ cert: identity.cert, key: identity.key }),
  });
  server = createServer({ cert: keeper.current.cert, key: keeper.current.key }, onRequest);
  server.on("upgrade", onUpgrade);
  const https = server;
  try {
    await new Promise<void>((resolve, reject) => {
      https.once("error", reject);
      https.listen(config.tlsPort as number, config.host, () => resolve());
    });
  } catch (err) {
    keeper.stop();
    const code = (err as NodeJS.ErrnoException).code;
    throw new WarrenError(
      "invalid_argument",
      `cannot serve HTTPS on ${config.host}:${config.tlsPort} (${code}): set WARREN_TLS_PORT to a free port, or off`,
    );
  }
  const port = (https.address() as AddressInfo).port;
  const url = `https://api.${domain}${port === 443 ? "" : `:${port}`}`;
  log.info(
    { url, port, domain, certificate: source.kind, ca: keeper.caFile },
    "server.tls_listening",
  );
  return {
    url,
    caFile: keeper.caFile,
    close: async () => {
      keeper.stop();
      https.closeAllConnections();
      await new Promise<void>((resolve) => https.close(() => resolve()));
    },
  };
}
