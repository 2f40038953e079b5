import type { Ask, AskRefusal, LeafPem, ServicesEvent, ServicesRequest } from "./messages.js";

/** Asks waiting at once; more fail at once (the server answers 64 at a time anyway). */
const MAX_WAITING = 256;
const ASK_TIMEOUT_MS = 10_000;

/** The server refused an ask (`reason`: why, messages.ts `AskRefusal`). */
export class AskRefused extends Error {
  constructor(
    readonly reason: AskRefusal,
    message: string,
  ) {
    super(message);
  }
}

type Answer = Extract<ServicesRequest, { type: "answer" | "refusal" }>;

/** The process's side of its asks: each sent with an id, answered or failed within 10 s. */
export class Asks {
  readonly #waiting = new Map<
    number,
    { resolve(value: LeafPem | string | null): void; reject(err: Error): void }
  >();
  #nextId = 0;

  constructor(private readonly send: (event: ServicesEvent) => void) {}

  ask(ask: Ask): Promise<LeafPem | string | null> {
    if (this.#waiting.size >= MAX_WAITING) {
      return Promise.reject(new AskRefused("failed", "too many asks waiting"));
    }
    this.#nextId += 1;
    const id = this.#nextId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(new AskRefused("failed", "the server did not answer in time"));
      }, ASK_TIMEOUT_MS);
      this.#waiting.set(id, {
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
      this.send({ type: "ask", id, ask });
    });
  }

  settle(answer: Answer): void {
    const waiting = this.#waiting.get(answer.id);
    if (!waiting) return;
    this.#waiting.delete(answer.id);
    if (answer.type === "answer") waiting.resolve(answer.value);
    else waiting.reject(new AskRefused(answer.reason, answer.message));
  }
}
