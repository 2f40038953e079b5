import type { Logger } from "../../shared/index.js";
import type { GuestAgent } from "../guest/guest-agent.js";
import type { SandboxTable } from "./sandbox-table.js";
import { carryIdleSample, takeMetricsSample } from "./telemetry.js";

export interface MetricsSamplerOptions {
  readonly table: SandboxTable;
  readonly agent: GuestAgent;
  /** Between two rounds (ms); 0: no background sampling (metrics only when asked). */
  readonly intervalMs: number;
  readonly logger: Logger;
}

/** Guests asked at once in a round: each sample is one small envd call. */
const CONCURRENCY = 4;

/**
 * Samples every running sandbox's metrics in the background, so `getMetrics` over a past
 * window has data (E2B keeps them too). Each round asks each guest once — unless its VMM
 * has hardly run since the last sample: an idle guest is not woken, its last figures are
 * repeated (telemetry.ts carryIdleSample), and it is asked again at least every sixth
 * round. A round still running when the next is due makes that one skip.
 */
export class MetricsSampler {
  readonly #o: MetricsSamplerOptions;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;

  constructor(options: MetricsSamplerOptions) {
    this.#o = options;
  }

  start(): void {
    if (this.#o.intervalMs <= 0 || this.#timer) return;
    this.#timer = setInterval(() => {
      this.#round ??= this.round().finally(() => {
        this.#round = undefined;
      });
    }, this.#o.intervalMs);
    this.#timer.unref();
  }

  /** One sample of each running sandbox (also what the timer runs). */
  async round(): Promise<void> {
    const running = this.#o.table.values().filter((live) => live.row.state === "running");
    let next = 0;
    const worker = async () => {
      for (let live = running[next++]; live; live = running[next++]) {
        if (await carryIdleSample(live)) continue;
        await takeMetricsSample(this.#o.agent, live).catch((err: unknown) =>
          this.#o.logger.debug({ sandboxId: live.row.id, err }, "sandbox.metrics_sample_failed"),
        );
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  }

  /** Stops sampling; waits for a round in progress. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#round;
  }
}
