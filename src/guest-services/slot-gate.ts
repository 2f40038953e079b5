import { createSecureContext, type SecureContext } from "node:tls";
import {
  EgressGate,
  type GateInterception,
  type GateSockets,
  hostResolve,
  type Resolve,
  resolverAt,
  SecretHostRefusedError,
  slotLimits,
  validateEgressPolicy,
} from "../network/index.js";
import type { Logger } from "../shared/index.js";
import { AskRefused, type Asks } from "./asks.js";
import type { GateSettings, GateSpec, LeafPem } from "./messages.js";

/** Leaves kept at once (per process), and for how long: the CA issues them for a week. */
const MAX_LEAVES = 256;
const LEAF_KEEP_MS = 60 * 60 * 1000;

/**
 * What the process's gates share: the resolver, and the TLS contexts of the egress CA's
 * leaves it was given (asked of the server once per name and hour).
 */
export class GateShared {
  readonly settings: GateSettings;
  readonly resolve: Resolve;
  readonly #leaves = new Map<string, { at: number; context: Promise<SecureContext> }>();

  constructor(
    settings: GateSettings,
    readonly asks: Asks,
  ) {
    this.settings = settings;
    this.resolve = settings.resolver ? resolverAt(settings.resolver) : hostResolve;
  }

  contextFor(slot: string, name: string): Promise<SecureContext> {
    const known = this.#leaves.get(name);
    if (known && Date.now() - known.at < LEAF_KEEP_MS) return known.context;
    const context = this.asks.ask({ kind: "leaf", slot, name }).then((value) => {
      if (!isLeaf(value)) throw new Error(`no certificate for ${name}`);
      return createSecureContext(value);
    });
    const entry = { at: Date.now(), context };
    this.#leaves.delete(name);
    this.#leaves.set(name, entry);
    if (this.#leaves.size > MAX_LEAVES) {
      this.#leaves.delete(this.#leaves.keys().next().value as string);
    }
    context.catch(() => {
      if (this.#leaves.get(name) === entry) this.#leaves.delete(name);
    });
    return context;
  }
}

/** A slot's gate on the sockets the server handed over, asking the server for what it lacks. */
export function serveSlotGate(
  slot: string,
  spec: GateSpec,
  sockets: GateSockets,
  shared: GateShared,
  logger: Logger,
): EgressGate {
  const interception: GateInterception = {
    contextFor: (name) => shared.contextFor(slot, name),
    ...(shared.settings.upstreamCa && { upstreamCa: shared.settings.upstreamCa }),
    // The team is the server's to say (the slot's policy there), not this process's.
    secretValue: (_team, name, host) => secretValue(shared, slot, name, host),
  };
  return EgressGate.serve(
    sockets,
    {
      netns: slot,
      gateway: spec.gateway,
      limits: () => slotLimits(spec.base),
      resolve: shared.resolve,
      ...(shared.settings.rules && { interception }),
      logger,
    },
    validateEgressPolicy(spec.policy),
  );
}

async function secretValue(
  shared: GateShared,
  slot: string,
  name: string,
  host: string,
): Promise<string | undefined> {
  try {
    const value = await shared.asks.ask({ kind: "secret", slot, name, host });
    return typeof value === "string" ? value : undefined;
  } catch (err) {
    if (err instanceof AskRefused && err.reason === "host") {
      throw new SecretHostRefusedError(name, host);
    }
    throw err;
  }
}

function isLeaf(value: unknown): value is LeafPem {
  const v = value as Partial<LeafPem> | null;
  return typeof v?.cert === "string" && typeof v.key === "string";
}
