import type { Socket } from "node:net";
import {
  bindUdpInNamespace,
  listenInNamespace,
  originalDestination,
} from "../listen-in-namespace.js";
import { GATE_DNS_PORT, GATE_TCP_PORT } from "../netns-rules.js";

/** Where one of the gate's sockets listens: a descriptor, or an address (tests, loopback). */
export type ListenAt = { readonly fd: number } | { readonly host: string; readonly port: number };

/**
 * How a gate gets its three sockets (each asked for in turn: a failure leaves none of the
 * later ones open) and where a connection it accepted was first sent.
 */
export interface GateEndpoints {
  readonly tcp: () => ListenAt;
  readonly dnsTcp: () => ListenAt;
  readonly dnsUdp: () => ListenAt;
  readonly originalDestination: (socket: Socket) => { address: string; port: number };
}

/** A slot's: inside its namespace on its gateway address, redirected there by its nat rules. */
export function namespaceEndpoints(netns: string, gateway: string): GateEndpoints {
  return {
    tcp: () => ({ fd: listenInNamespace(netns, gateway, GATE_TCP_PORT) }),
    dnsTcp: () => ({ fd: listenInNamespace(netns, gateway, GATE_DNS_PORT) }),
    dnsUdp: () => ({ fd: bindUdpInNamespace(netns, gateway, GATE_DNS_PORT) }),
    originalDestination,
  };
}
