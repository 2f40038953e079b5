import { execFileSync } from "node:child_process";
import { createSocket } from "node:dgram";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as dnsPacket from "dns-packet";

/**
 * A DNS server of the tests' own on 127.0.0.1 (a stand-in for the host's resolver, given to
 * Warren as its egress resolver): A records from `answer(name)`, NXDOMAIN where it has none.
 */
export async function startFakeDns(
  answer: (name: string) => string | undefined,
): Promise<{ readonly port: number; close(): void }> {
  const server = createSocket("udp4");
  server.on("message", (query, from) => {
    const packet = dnsPacket.decode(query);
    const question = packet.questions?.[0];
    const name = question?.name.toLowerCase() ?? "";
    const address = question?.type === "A" ? answer(name) : undefined;
    const reply = dnsPacket.encode({
      type: "response",
      id: packet.id ?? 0,
      flags: address || question?.type !== "A" ? 0 : 3, // NXDOMAIN
      questions: question ? [question] : [],
      answers: address ? [{ type: "A", name, class: "IN", ttl: 5, data: address }] : [],
    });
    server.send(reply, from.port, from.address);
  });
  await new Promise<void>((resolve) => server.bind(0, "127.0.0.1", resolve));
  return { port: server.address().port, close: () => server.close() };
}

/** A throwaway self-signed certificate (openssl), as PEM text. */
export function selfSignedCertificate(commonName: string): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), "warren-test-cert-"));
  try {
    execFileSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"],
        ...["-subj", `/CN=${commonName}`, "-days", "1"],
        ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")],
      ],
      { stdio: "ignore" },
    );
    return {
      key: readFileSync(join(dir, "key.pem"), "utf8"),
      cert: readFileSync(join(dir, "cert.pem"), "utf8"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
