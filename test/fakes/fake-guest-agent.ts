/**
 * FakeGuestAgent: a STAND-IN for EnvdGuestAgent (envd over HTTP) in orchestrator unit tests. It
 * answers for the fake guest behind a slot's host address as envd would: /init is refused
 * unless it proves the token the guest's envd holds (in the header or as the body's own
 * accessToken), then sets the guest's env and, when the body names one, its token; calls to
 * a guest that is not running wait (connection refused, retried) until the deadline
 * (guest_unavailable), or until its VM exits. Tests can hold /init calls at a gate or make
 * envd refuse them.
 *
 * A guest whose user replaced envd: when its memory (carried by snapshots, forks, resumes)
 * has REPLACED_ENVD set to an address, every call to it goes over HTTP, with the real
 * EnvdGuestAgent, to whatever listens there on envd's port (test/helpers/hostile-envd.ts).
 */
import { EnvdGuestAgent, type GuestAgent, type InitOptions } from "../../src/orchestrator/index.js";
import type { EnvdInitRequest, EnvdMetrics } from "../../src/protocol/index.js";
import { WarrenError } from "../../src/shared/index.js";
import type { FakeSlotPool } from "./fake-slot-pool.js";
import type { FakeVm, FakeVmmDriver } from "./fake-vmm-driver.js";
import type { Gate } from "./gate.js";

const POLL_MS = 5;
/** Key of a fake guest's memory: the address of the server that replaced its envd. */
export const REPLACED_ENVD = "envd-replaced-by";

export class FakeGuestAgent implements GuestAgent {
  readonly inits: { host: string; body: EnvdInitRequest; token?: string }[] = [];
  exercises = 0;
  /** Every /init waits here first (when set). */
  initGate: Gate | undefined;
  /** The next /init calls answer 500, as a broken envd would. */
  failInits = 0;
  #stopped = false;
  readonly #real = new EnvdGuestAgent();

  constructor(
    readonly driver: FakeVmmDriver,
    readonly slots: FakeSlotPool,
  ) {}

  /** Its server crashed: calls waiting for a guest stop polling (their callers are gone). */
  stop(): void {
    this.#stopped = true;
  }

  async init(host: string, body: EnvdInitRequest, options: InitOptions): Promise<void> {
    await this.initGate?.passed(host);
    const vm = await this.#reach(host, options.deadlineMs, options.signal);
    const replaced = vm.guest.memory[REPLACED_ENVD];
    if (replaced) return this.#real.init(replaced, body, options);
    const { guest } = vm;
    const held = guest.envdToken;
    if (this.failInits > 0) {
      this.failInits -= 1;
      throw new WarrenError("internal", "envd refused /init: 500 internal error");
    }
    if (held !== undefined && options.token !== held && body.accessToken !== held) {
      throw new WarrenError("internal", "envd refused /init: 401 invalid access token");
    }
    if (body.accessToken !== undefined) guest.envdToken = body.accessToken || undefined;
    guest.envVars = { ...(body.envVars ?? {}) };
    guest.inits += 1;
    this.inits.push({ host, body, token: options.token });
  }

  async waitForHealth(
    host: string,
    options: { deadlineMs: number; exited?: Promise<unknown>; signal?: AbortSignal },
  ): Promise<void> {
    let gone = false;
    void options.exited?.then(() => {
      gone = true;
    });
    const vm = await this.#reach(host, options.deadlineMs, options.signal, () => gone);
    const replaced = vm.guest.memory[REPLACED_ENVD];
    if (replaced) await this.#real.waitForHealth(replaced, options);
  }

  async exercise(host: string, token?: string, signal?: AbortSignal): Promise<void> {
    const vm = await this.#reach(host, 1_000, signal);
    const replaced = vm.guest.memory[REPLACED_ENVD];
    if (replaced) return this.#real.exercise(replaced, token, signal);
    // As envd: a captured token guards /init, files and processes.
    if (vm.guest.envdToken !== undefined && token !== vm.guest.envdToken) {
      throw new WarrenError("internal", "envd refused /init: 401 invalid access token");
    }
    this.exercises += 1;
  }

  async metrics(host: string, token?: string, signal?: AbortSignal): Promise<EnvdMetrics> {
    const vm = await this.#reach(host, 1_000, signal);
    const replaced = vm.guest.memory[REPLACED_ENVD];
    if (replaced) return this.#real.metrics(replaced, token, signal);
    if (vm.guest.envdToken !== undefined && token !== vm.guest.envdToken) {
      throw new WarrenError("internal", "envd /metrics answered 401");
    }
    return {
      ts: Math.floor(Date.now() / 1000),
      cpu_count: vm.spec.shape.vcpus,
      cpu_used_pct: 1.5,
      mem_total: vm.spec.shape.memoryMiB * 1024 * 1024,
      mem_used: 64 * 1024 * 1024,
      mem_cache: 0,
      mem_total_mib: vm.spec.shape.memoryMiB,
      mem_used_mib: 64,
      disk_total: 2 * 1024 ** 3,
      disk_used: 1024 ** 3,
    };
  }

  /**
   * The guest's envd log lines are its `memory.log` (one per line), numbered from 1, each
   * logged now or at `@<epoch ms> ` before its text (a line its template's build logged).
   */
  async logs(host: string, token: string | undefined, after: number, signal?: AbortSignal) {
    const vm = await this.#reach(host, 1_000, signal);
    if (vm.guest.envdToken !== undefined && token !== vm.guest.envdToken) {
      throw new WarrenError("internal", "envd logs answered 401");
    }
    const lines = (vm.guest.memory.log ?? "").split("\n").filter((line) => line !== "");
    return lines
      .map((line, i) => {
        const at = /^@(\d+) (.*)$/.exec(line);
        const timestamp = at ? Number(at[1]) : Date.now();
        return { seq: i + 1, timestamp, level: "info" as const, message: at?.[2] ?? line };
      })
      .filter((line) => line.seq > after);
  }

  /** `sync`s the guest asked for, by sandbox VM id. */
  readonly syncs: string[] = [];

  async sync(host: string, token?: string, signal?: AbortSignal): Promise<void> {
    const vm = await this.#reach(host, 1_000, signal);
    if (vm.guest.envdToken !== undefined && token !== vm.guest.envdToken) {
      throw new WarrenError("internal", "envd refused the process: 401");
    }
    this.syncs.push(vm.id);
  }

  /**
   * The running guest at `host`, waited for as a client retries a refused connection;
   * `gone`: its VM exited, so waiting is over.
   */
  async #reach(
    host: string,
    deadlineMs: number,
    signal?: AbortSignal,
    gone?: () => boolean,
  ): Promise<FakeVm> {
    const deadline = Date.now() + deadlineMs;
    for (;;) {
      if (this.#stopped) return new Promise<never>(() => {});
      signal?.throwIfAborted();
      if (gone?.()) throw new WarrenError("internal", "the VM exited before envd answered");
      const slot = this.slots.byHost(host);
      const vm = slot && this.driver.vmIn(slot.netns);
      if (vm?.running) return vm;
      if (Date.now() >= deadline) {
        throw new WarrenError(
          "guest_unavailable",
          `envd at ${host} did not answer within ${deadlineMs} ms`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }
}
