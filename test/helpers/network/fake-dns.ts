import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  EgressGate,
  type GateHost,
  type GateInterception,
  NetnsSlotPool,
  type NetworkSlot,
  resolverAt,
  slotLimits,
} from "../../../src/network/index.js";
import { startFakeDns } from "../fake-dns-server.js";
import { runPoolOptions } from "../run-env.js";
import { FakeGuest, TAP_OWNER } from "./fake-guest.js";
import { FAKENET } from "./fake-net.js";

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
 * bench drive. Its gate runs in this process, where `gateConnections` counts its connections.
 * Everything it makes is deferred to `cleanup`.
 */
export async function guestBehindGate(
  cleanup: { defer(undo: () => unknown): void },
  answer: (name: string) => string | undefined,
  interception?: GateInterception,
): Promise<{ slot: NetworkSlot; guest: FakeGuest; gateConnections(): number }> {
  const dns = await startFakeDns(answer);
  cleanup.defer(() => dns.close());
  let gate: EgressGate | undefined;
  const gates: GateHost = {
    open: async (at, policy) => {
      const opened = await EgressGate.open(
        {
          ...at,
          limits: () => slotLimits(at.base),
          resolve: resolverAt(`127.0.0.1:${dns.port}`),
          ...(interception && { interception }),
        },
        policy,
      );
      gate = opened;
      return {
        update: (next) => opened.update(next),
        close: async () => {
          if (gate === opened) gate = undefined;
          await opened.close();
        },
      };
    },
  };
  const pool = new NetnsSlotPool({
    ...runPoolOptions(),
    size: 0,
    tapOwner: TAP_OWNER,
    egressInterface: FAKENET.hostVeth,
    gates,
  });
  cleanup.defer(() => pool.close());
  const slot = await pool.acquire();
  const guest = await FakeGuest.attach(slot);
  cleanup.defer(() => guest.close());
  return { slot, guest, gateConnections: () => gate?.connections ?? 0 };
}
