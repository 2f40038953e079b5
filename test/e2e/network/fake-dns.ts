import { execFileSync } from "node:child_process";
import { createSocket } from "node:dgram";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as dnsPacket from "dns-packet";
import {
  type GateInterception,
  NetnsSlotPool,
  type NetworkSlot,
  resolverAt,
} from "../../../src/network/index.js";
import { runPoolOptions } from "../../helpers/run-env.js";
import { FakeGuest, TAP_OWNER } from "./fake-guest.js";
import { FAKENET } from "./fake-net.js";

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

/**
 * A slot whose egress is the fake internet and whose egress gate resolves names with a fake
 * DNS server answering `answer`, with a fake guest on it: what the domain egress test and
 * bench drive. Everything it makes is deferred to `cleanup`.
 */
export async function guestBehindGate(
  cleanup: { defer(undo: () => unknown): void },
  answer: (name: string) => string | undefined,
  interception?: GateInterception,
): Promise<{ slot: NetworkSlot; guest: FakeGuest }> {
  const dns = await startFakeDns(answer);
  cleanup.defer(() => dns.close());
  const pool = new NetnsSlotPool({
    ...runPoolOptions(),
    size: 0,
    tapOwner: TAP_OWNER,
    egressInterface: FAKENET.hostVeth,
    resolve: resolverAt(`127.0.0.1:${dns.port}`),
    ...(interception && { interception }),
  });
  cleanup.defer(() => pool.close());
  const slot = await pool.acquire();
  const guest = await FakeGuest.attach(slot);
  cleanup.defer(() => guest.close());
  return { slot, guest };
}
