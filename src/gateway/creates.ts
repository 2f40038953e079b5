import type { IncomingMessage, ServerResponse } from "node:http";
import { type Logger, WarrenError } from "../shared/index.js";
import { forwardRequest, type NodeAgents } from "./forward.js";
import type { NodeDirectory } from "./node-directory.js";
import { type PlacementRequest, rankNodes } from "./placement.js";

export interface CreatesOptions {
  readonly directory: NodeDirectory;
  readonly agents: NodeAgents;
  readonly logger: Logger;
  /** Creates waiting for room at once; one more is refused at once (429). */
  readonly maxQueued: number;
  /** How long a create waits for room before it is refused (429), ms. */
  readonly maxWaitMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

/**
 * What the gateway assumes a create needs before the node, which knows the template's shape,
 * decides: small, so that no node with room is skipped; a node short of room refuses (429)
 * and the next is tried.
 */
const ASSUMED_SHAPE = { vcpus: 1, memoryMiB: 256 } as const;

/** Node answers that mean "not here, try another": out of room or disk, or not ready yet. */
const TRY_ANOTHER = new Set([429, 503, 507]);

/**
 * A node's refusals for being busy starting VMs: its own start queue is full or too slow. Its
 * queue bounds the wait already; a gateway queue on top would compound it (and its retries
 * would add to the node's load), so when every node says this the create is refused at once.
 */
const BUSY = new Set(["start_queue_full", "start_queue_timeout"]);
/**
 * A node's refusal after holding the create in its start queue (it no longer expected to get
 * to it in time): the create has waited already, and in a burst the next node's queue would
 * hold it as long again, so no other node is tried — the client's wait is one node's bound,
 * not the sum of them all.
 */
const SHED = "start_queue_timeout";
/**
 * How long a node that refused for being busy is not asked again (at most: less if its
 * Retry-After says so). In a burst, asking it would only add to what its event loop answers
 * while its cores start VMs, and the refusal would be the same.
 */
const BUSY_HOLD_MS = 1_000;

/** A node's last busy refusal, kept for BUSY_HOLD_MS. */
interface Busy {
  readonly untilMs: number;
  readonly why: string;
  readonly retryAfterS: number | undefined;
}

/**
 * Places creates (`POST /sandboxes`, `POST /v2/sandboxes`). Nodes are tried best first
 * (placement.ts); one that refuses for room or is unreachable is skipped. When none takes the
 * create, it waits in a bounded queue for room (a refresh or a release) until `maxWaitMs`;
 * a full queue or the end of the wait is a 429 with Retry-After (the soonest a node gave),
 * never a pile of timeouts. Nodes all busy starting VMs refuse it at once (BUSY), one that
 * held it and then shed it ends its placement (SHED), and a node
 * that said so is taken at its word for a second rather than asked again: a burst's creates
 * are then refused by the gateway itself, promptly, including those for which no node has
 * room by the gateway's count only because the burst's earlier creates are still in flight.
 */
export class Creates {
  readonly #o: CreatesOptions;
  #queued = 0;
  readonly #busy = new Map<string, Busy>();

  constructor(options: CreatesOptions) {
    this.#o = options;
  }

  get queued(): number {
    return this.#queued;
  }

  async handle(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const { directory, logger } = this.#o;
    const request: PlacementRequest = { templateId: templateOf(body), ...ASSUMED_SHAPE };
    const deadline = Date.now() + this.#o.maxWaitMs;
    const refusals = new Map<string, string>();
    /** The soonest a refusing node said it may have room (its Retry-After), seconds. */
    let soonestS: number | undefined;
    for (;;) {
      const nodes = await directory.nodes();
      if (!nodes.some((node) => node.state === "up")) {
        throw new WarrenError("no_nodes", "no node server is up to place the sandbox on");
      }
      const ranked = rankNodes(nodes, request, directory.reserved, {
        heartbeatTimeoutMs: this.#o.heartbeatTimeoutMs,
        sinceReadMs: directory.sinceReadMs,
      });
      /** A node's busy refusal of a moment ago, counted as its answer now: true if it had one. */
      const takenAtItsWord = (nodeId: string): boolean => {
        const busy = this.#busyNow(nodeId);
        if (!busy) return false;
        refusals.set(nodeId, busy.why);
        if (busy.retryAfterS !== undefined)
          soonestS = Math.min(soonestS ?? busy.retryAfterS, busy.retryAfterS);
        return true;
      };
      // Whether every node tried this round was busy starting VMs (see BUSY); with none to
      // try, whether every node up said so a moment ago.
      let allBusy =
        ranked.length > 0 ||
        nodes.filter((node) => node.state === "up").every((node) => takenAtItsWord(node.id));
      for (const node of ranked) {
        if (takenAtItsWord(node.id)) continue;
        const release = directory.reserve(node, request);
        const outcome = await forwardRequest(
          req,
          res,
          { nodeId: node.id, url: node.url },
          {
            agents: this.#o.agents,
            body,
            idleTimeoutMs: this.#o.idleTimeoutMs,
            intercept: (status) => TRY_ANOTHER.has(status),
          },
        );
        if (outcome.kind === "relayed") {
          if (outcome.status >= 300) release();
          logger.debug(
            { nodeId: node.id, status: outcome.status, template: request.templateId },
            "gateway.create_placed",
          );
          return;
        }
        release();
        // The client left before the node answered: nobody is waiting for another try.
        if (outcome.kind === "ended") return;
        const why =
          outcome.kind === "unreachable" ? "unreachable" : reasonOf(outcome.body, outcome.status);
        refusals.set(node.id, why);
        const retryAfterS = outcome.kind === "intercepted" ? Number(outcome.retryAfter) : NaN;
        const given = retryAfterS >= 1 ? retryAfterS : undefined;
        if (given !== undefined) soonestS = Math.min(soonestS ?? given, given);
        if (!BUSY.has(why)) {
          allBusy = false;
          continue;
        }
        const holdMs = Math.min(BUSY_HOLD_MS, (given ?? 1) * 1000);
        this.#busy.set(node.id, { untilMs: Date.now() + holdMs, why, retryAfterS: given });
        if (why === SHED) {
          allBusy = true;
          break;
        }
      }
      const remaining = deadline - Date.now();
      if (allBusy || remaining <= 0 || this.#queued >= this.#o.maxQueued) {
        const tried = [...refusals].map(([id, why]) => `${id}: ${why}`).join(", ");
        throw new WarrenError(
          "cluster_full",
          `no node has room for a sandbox of template '${request.templateId}'${tried ? ` (${tried})` : ""}: retry later`,
          { retryAfterS: soonestS },
        );
      }
      this.#queued += 1;
      try {
        await directory.changed(Math.min(remaining, 1000));
      } finally {
        this.#queued -= 1;
      }
    }
  }

  /** The node's busy refusal if it is still to be taken at its word, else undefined. */
  #busyNow(nodeId: string): Busy | undefined {
    const busy = this.#busy.get(nodeId);
    if (busy && busy.untilMs > Date.now()) return busy;
    this.#busy.delete(nodeId);
    return undefined;
  }
}

/** The create body's template (E2B's default is `base`); a bad body is the node's to refuse. */
function templateOf(body: Buffer): string {
  try {
    const parsed: unknown = JSON.parse(body.toString("utf8"));
    const id = (parsed as { templateID?: unknown } | null)?.templateID;
    return typeof id === "string" ? id : "base";
  } catch {
    return "base";
  }
}

function reasonOf(body: Buffer, status: number): string {
  try {
    const parsed = JSON.parse(body.toString("utf8")) as { reason?: unknown };
    if (typeof parsed.reason === "string") return parsed.reason;
  } catch {
    // Not ours to read: the status says enough.
  }
  return String(status);
}
