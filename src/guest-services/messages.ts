import type { PostRequest } from "../events/post.js";
import type { EgressPolicy } from "../network/index.js";
import type { NfsExport } from "../volumes/index.js";

/**
 * What the server and the guest services process say to each other over the child's IPC
 * channel. Each service is keyed by its kind and the slot it serves (the slot's network
 * namespace). Its listening sockets come first, one `listener` message each (a `net.Server`
 * or `dgram.Socket` handle: the process receives on it from then on), then the open that
 * uses them; a connection the server accepted before handing a listener over comes as a
 * socket handle. The server checks every event (`isServicesEvent`): the process parses what
 * guests send, so it is trusted no more than they are.
 */
export type ServiceKind = "nfs" | "gate";

/** A service's listeners: NFS's one; the gate's TCP, DNS over TCP and DNS over UDP. */
export type ListenerName = "nfs" | "tcp" | "dnsTcp" | "dnsUdp";

/** What every gate of the node shares, sent once after the process starts. */
export interface GateSettings {
  /** The DNS server gates resolve allowed names with (`host[:port]`); unset: the host's. */
  readonly resolver?: string;
  /** Roots upstream servers are checked against; unset: Node's own. */
  readonly upstreamCa?: readonly string[];
  /** Whether header rules are served (the node has an egress CA and secrets). */
  readonly rules: boolean;
}

/** One slot's gate. */
export interface GateSpec {
  readonly policy: EgressPolicy;
  /** The slots' block (CIDR): what no policy opens, with the host's own addresses. */
  readonly base: string;
  readonly gateway: string;
}

/** A leaf certificate of the node's egress CA, as a gate presents it (PEM). */
export interface LeafPem {
  readonly cert: string;
  readonly key: string;
}

/** What a gate asks the server for: it holds neither the CA's key nor any secret. */
export type Ask =
  | { readonly kind: "leaf"; readonly slot: string; readonly name: string }
  | {
      readonly kind: "secret";
      readonly slot: string;
      readonly name: string;
      readonly host: string;
    };

/** Why an ask was refused: `host` a secret bound elsewhere, `refused` not the slot's to ask. */
export type AskRefusal = "host" | "refused" | "failed";

export type ServicesRequest =
  | {
      readonly type: "listener";
      readonly slot: string;
      readonly service: ServiceKind;
      readonly name: ListenerName;
    }
  /** A guest's connection to a listener, accepted by the server unread (the handle). */
  | {
      readonly type: "connection";
      readonly slot: string;
      readonly service: ServiceKind;
      readonly name: ListenerName;
    }
  | { readonly type: "gate.settings"; readonly settings: GateSettings }
  /** Opens are answered `done` or `failed` with their id. */
  | {
      readonly type: "nfs.open";
      readonly id: number;
      readonly slot: string;
      readonly spec: NfsExport;
    }
  | {
      readonly type: "gate.open";
      readonly id: number;
      readonly slot: string;
      readonly gate: GateSpec;
    }
  | {
      readonly type: "gate.update";
      readonly id: number;
      readonly slot: string;
      readonly policy: EgressPolicy;
    }
  | { readonly type: "close"; readonly slot: string; readonly service: ServiceKind }
  /** A webhook delivery attempt: answered `posted` (the receiver's status) or `failed`. */
  | { readonly type: "post"; readonly id: number; readonly request: PostRequest }
  | { readonly type: "answer"; readonly id: number; readonly value: LeafPem | string | null }
  | {
      readonly type: "refusal";
      readonly id: number;
      readonly reason: AskRefusal;
      readonly message: string;
    };

export type ServicesEvent =
  | { readonly type: "ready" }
  | { readonly type: "done"; readonly id: number }
  | { readonly type: "failed"; readonly id: number; readonly message: string }
  | { readonly type: "posted"; readonly id: number; readonly status: number }
  | { readonly type: "ask"; readonly id: number; readonly ask: Ask };

const SLOT = /^[A-Za-z0-9._-]{1,64}$/;
const SERVICES: readonly unknown[] = ["nfs", "gate"];
const LISTENERS: readonly unknown[] = ["nfs", "tcp", "dnsTcp", "dnsUdp"];
/** A DNS name's most; secrets' names are shorter still (secrets.ts). */
const MAX_NAME = 253;
const MAX_MESSAGE = 4096;

type Fields = Partial<Record<string, unknown>>;

const isId = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 0;
const isSlot = (v: unknown): v is string => typeof v === "string" && SLOT.test(v);
const isName = (v: unknown): v is string =>
  typeof v === "string" && v.length > 0 && v.length <= MAX_NAME;
const isObject = (v: unknown): v is Fields => typeof v === "object" && v !== null;

/** Whether a message is a well-formed request (the rest is dropped). */
export function isServicesRequest(message: unknown): message is ServicesRequest {
  if (!isObject(message)) return false;
  const m = message;
  switch (m.type) {
    case "listener":
    case "connection":
      return isSlot(m.slot) && SERVICES.includes(m.service) && LISTENERS.includes(m.name);
    case "gate.settings":
      return isObject(m.settings) && typeof m.settings.rules === "boolean";
    case "nfs.open":
      return isId(m.id) && isSlot(m.slot) && isObject(m.spec);
    case "gate.open":
      return isId(m.id) && isSlot(m.slot) && isObject(m.gate) && typeof m.gate.base === "string";
    case "gate.update":
      return isId(m.id) && isSlot(m.slot) && isObject(m.policy);
    case "close":
      return isSlot(m.slot) && SERVICES.includes(m.service);
    case "post":
      return isId(m.id) && isObject(m.request) && typeof m.request.url === "string";
    case "answer":
      return isId(m.id);
    case "refusal":
      return isId(m.id) && typeof m.reason === "string" && typeof m.message === "string";
    default:
      return false;
  }
}

/** Whether a message is an event the server takes: bounded, of a known shape. */
export function isServicesEvent(message: unknown): message is ServicesEvent {
  if (!isObject(message)) return false;
  const m = message;
  switch (m.type) {
    case "ready":
      return true;
    case "done":
      return isId(m.id);
    case "failed":
      return isId(m.id) && typeof m.message === "string" && m.message.length <= MAX_MESSAGE;
    case "posted":
      return isId(m.id) && Number.isInteger(m.status) && (m.status as number) >= 0;
    case "ask":
      return isId(m.id) && isAsk(m.ask);
    default:
      return false;
  }
}

function isAsk(ask: unknown): ask is Ask {
  if (!isObject(ask) || !isSlot(ask.slot) || !isName(ask.name)) return false;
  if (ask.kind === "leaf") return true;
  return ask.kind === "secret" && isName(ask.host);
}
