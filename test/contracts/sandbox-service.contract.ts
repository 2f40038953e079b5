import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type {
  CreateSandboxInput,
  RouteAccess,
  SandboxInfo,
  SandboxLifecycle,
  SandboxRouter,
  SandboxService,
} from "../../src/orchestrator/index.js";
import type { ErrorReason } from "../../src/shared/index.js";

/** Where a test holds VM starts (creates, resumes, fork children) to act while they wait. */
export interface StartGate {
  /** The ids of the sandboxes whose starts are held, once `n` are. */
  reached(n?: number): Promise<string[]>;
  open(): void;
}

/** Fault injection, for implementations that start (real or fake) VMs. */
export interface SandboxFaults {
  /** From now on every VM start waits at the returned gate until it opens. */
  holdStarts(): StartGate;
  /** The next pause fails: "error" with the VMM still running, "crash" with the VMM gone. */
  failNextPause(how: "error" | "crash"): void;
}

/** What an implementation's test file hands the suite: a fresh service per test. */
export interface SandboxServiceHarness {
  readonly service: SandboxService;
  /** The proxy's view, for implementations that route traffic. */
  readonly router?: SandboxRouter;
  /** A template every create may use. */
  readonly templateId: string;
  /** The service's limit of running sandboxes (small: the suite fills it). */
  readonly maxSandboxes: number;
  readonly maxForkCount: number;
  readonly faults?: SandboxFaults;
  /**
   * Stops the service, gracefully (`close`) or as a crash would (nothing shut down), and
   * starts a new one on the same state; the harness's `service` and `router` follow.
   */
  readonly restart?: (mode: "graceful" | "crash") => Promise<void>;
  /** What the service still holds beyond its idle state (VMs, slots, files): [] when clean. */
  readonly leaks?: () => Promise<string[]>;
  readonly cleanup: () => Promise<void>;
}

const ENVD_PORT = 49983;

/** The proxy's wake check for a request carrying whatever the sandbox asks. */
const anyRequest = () => true;

/** A create input with the defaults the API fills in; `over` replaces fields. */
export function createInput(
  templateId: string,
  over: Partial<CreateSandboxInput> = {},
): CreateSandboxInput {
  return {
    teamId: "default",
    templateId,
    timeoutMs: 60_000,
    metadata: {},
    envVars: {},
    lifecycle: { onTimeout: "kill", autoResume: false },
    network: { allowOut: [], denyOut: [], allowPublicTraffic: true },
    allowInternetAccess: true,
    secure: false,
    ...over,
  };
}

function lifecycle(over: Partial<SandboxLifecycle>): SandboxLifecycle {
  return { onTimeout: "kill", autoResume: false, ...over };
}

/** An assert.rejects/throws matcher for a WarrenError of this reason. */
function reason(expected: ErrorReason): { name: string; reason: ErrorReason } {
  return { name: "WarrenError", reason: expected };
}

async function eventually(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function stateOf(service: SandboxService, sandboxId: string): string {
  try {
    return service.get(sandboxId).state;
  } catch {
    return "gone";
  }
}

/** Registers the behaviour every SandboxService must have; run it from each implementation's tests. */
export function sandboxServiceContract(
  name: string,
  open: () => Promise<SandboxServiceHarness>,
): void {
  async function use(t: TestContext): Promise<SandboxServiceHarness> {
    const harness = await open();
    t.after(harness.cleanup);
    return harness;
  }

  async function create(
    h: SandboxServiceHarness,
    over: Partial<CreateSandboxInput> = {},
  ): Promise<SandboxInfo> {
    return h.service.create(createInput(h.templateId, over));
  }

  /** Skips (printing why) when the harness lacks a capability the test needs. */
  function needs<K extends keyof SandboxServiceHarness>(
    t: TestContext,
    h: SandboxServiceHarness,
    key: K,
  ): h is SandboxServiceHarness & Required<Pick<SandboxServiceHarness, K>> {
    if (h[key] !== undefined) return true;
    t.skip(`${name} has no ${String(key)}`);
    return false;
  }

  async function assertClean(h: SandboxServiceHarness): Promise<void> {
    if (h.leaks) assert.deepEqual(await h.leaks(), [], "nothing left behind");
  }

  describe(`SandboxService contract: ${name}`, () => {
    it("is ready", async (t) => {
      const h = await use(t);
      assert.equal(h.service.status().phase, "ready");
    });

    it("create answers a running sandbox that get and list show", async (t) => {
      const h = await use(t);
      const before = Date.now();
      const info = await create(h, { metadata: { run: "r1" }, timeoutMs: 120_000 });
      assert.equal(info.state, "running");
      assert.deepEqual(info.metadata, { run: "r1" });
      assert.ok(info.cpuCount > 0 && info.memoryMiB > 0, "the sandbox has a shape");
      const ttl = info.endAt.getTime() - info.startedAt.getTime();
      assert.ok(Math.abs(ttl - 120_000) < 5_000, `endAt is startedAt + timeout (${ttl} ms)`);
      assert.ok(info.startedAt.getTime() >= before - 1_000);
      assert.equal(h.service.get(info.sandboxId).sandboxId, info.sandboxId);
      const listed = h.service.list({}).map((s) => s.sandboxId);
      assert.ok(listed.includes(info.sandboxId));
      assert.deepEqual(
        h.service.list({ metadata: { run: "r1" } }).map((s) => s.sandboxId),
        [info.sandboxId],
      );
      assert.ok(
        h.service.list({ template: h.templateId }).some((s) => s.sandboxId === info.sandboxId),
        "listed under its template",
      );
      assert.deepEqual(h.service.list({ metadata: { run: "other" } }), []);
    });

    it("lists oldest first and filters by state", async (t) => {
      const h = await use(t);
      const first = await create(h);
      await new Promise((resolve) => setTimeout(resolve, 5));
      const second = await create(h);
      await h.service.pause(second.sandboxId);
      const ids = h.service.list({}).map((s) => s.sandboxId);
      assert.ok(ids.indexOf(first.sandboxId) < ids.indexOf(second.sandboxId));
      assert.deepEqual(
        h.service.list({ states: ["paused"] }).map((s) => s.sandboxId),
        [second.sandboxId],
      );
      assert.deepEqual(
        h.service.list({ states: ["running"] }).map((s) => s.sandboxId),
        [first.sandboxId],
      );
    });

    it("an unknown sandbox is sandbox_not_found for every call", async (t) => {
      const h = await use(t);
      const id = "nosuchsandbox";
      const s = h.service;
      assert.throws(() => s.get(id), reason("sandbox_not_found"));
      for (const call of [
        () => s.kill(id),
        () => s.pause(id),
        () => s.connect(id, undefined),
        () => s.resume(id, undefined),
        () => s.setTimeout(id, 1_000),
        () => s.refresh(id, 1_000),
        () => s.metrics(id, {}),
        () => s.logs(id, {}),
        () => s.updateNetwork(id, { allowOut: [] }),
        () => s.fork(id, { count: 1 }),
        () => s.createSnapshot(id, {}),
      ]) {
        // A rejected promise, never a synchronous throw: callers chain .catch().
        const pending = call();
        assert.ok(pending instanceof Promise);
        await assert.rejects(pending, reason("sandbox_not_found"));
      }
    });

    it("a create from an unknown template is template_not_found", async (t) => {
      const h = await use(t);
      await assert.rejects(
        h.service.create(createInput("no-such-template")),
        reason("template_not_found"),
      );
      await assertClean(h);
    });

    it("kill: gone from get and list; killing again is sandbox_not_found", async (t) => {
      const h = await use(t);
      const info = await create(h);
      await h.service.kill(info.sandboxId);
      assert.throws(() => h.service.get(info.sandboxId), reason("sandbox_not_found"));
      assert.ok(!h.service.list({}).some((s) => s.sandboxId === info.sandboxId));
      await assert.rejects(h.service.kill(info.sandboxId), reason("sandbox_not_found"));
      await assertClean(h);
    });

    it("pause and connect: paused, then running again; wrong states are refused", async (t) => {
      const h = await use(t);
      const info = await create(h);
      await h.service.pause(info.sandboxId);
      assert.equal(h.service.get(info.sandboxId).state, "paused");
      await assert.rejects(h.service.pause(info.sandboxId), reason("sandbox_paused"));
      await assert.rejects(h.service.setTimeout(info.sandboxId, 5_000), reason("sandbox_paused"));
      await assert.rejects(h.service.refresh(info.sandboxId, 5_000), reason("sandbox_paused"));
      const connected = await h.service.connect(info.sandboxId, 90_000);
      assert.equal(connected.resumed, true);
      assert.equal(connected.sandbox.state, "running");
      assert.equal(h.service.get(info.sandboxId).state, "running");
      const left = connected.sandbox.endAt.getTime() - Date.now();
      assert.ok(left > 80_000 && left <= 91_000, `a resume restarts the TTL (${left} ms left)`);
      await assert.rejects(h.service.resume(info.sandboxId, undefined), reason("sandbox_running"));
      await h.service.pause(info.sandboxId);
      const resumed = await h.service.resume(info.sandboxId, 30_000);
      assert.equal(resumed.state, "running");
      await h.service.kill(info.sandboxId);
      await assertClean(h);
    });

    it("deadlines: connect and refresh only extend, setTimeout replaces", async (t) => {
      const h = await use(t);
      const info = await create(h, { timeoutMs: 100_000 });
      const endAt = () => h.service.get(info.sandboxId).endAt.getTime();
      const first = endAt();
      const connected = await h.service.connect(info.sandboxId, 10_000);
      assert.equal(connected.resumed, false);
      assert.equal(endAt(), first, "connect never shortens");
      await h.service.connect(info.sandboxId, 200_000);
      assert.ok(endAt() > first + 50_000, "connect extends");
      await h.service.refresh(info.sandboxId, 1_000);
      assert.ok(endAt() > first + 50_000, "refresh never shortens");
      await h.service.setTimeout(info.sandboxId, 5_000);
      assert.ok(endAt() < Date.now() + 6_000, "setTimeout may shorten");
      await h.service.refresh(info.sandboxId, 60_000);
      assert.ok(endAt() > Date.now() + 50_000, "refresh extends");
    });

    describe("TTL expiry", () => {
      it("kills a sandbox whose deadline passes (onTimeout kill)", async (t) => {
        const h = await use(t);
        const info = await create(h, { timeoutMs: 300 });
        await eventually(() => stateOf(h.service, info.sandboxId) === "gone", "killed at its TTL");
        await assertClean(h);
      });

      it("pauses it instead with onTimeout pause, and it resumes", async (t) => {
        const h = await use(t);
        const info = await create(h, {
          timeoutMs: 300,
          lifecycle: lifecycle({ onTimeout: "pause" }),
        });
        await eventually(
          () => stateOf(h.service, info.sandboxId) === "paused",
          "paused at its TTL",
        );
        const { resumed } = await h.service.connect(info.sandboxId, 60_000);
        assert.equal(resumed, true);
      });

      it("follows a deadline moved by setTimeout", async (t) => {
        const h = await use(t);
        const info = await create(h, { timeoutMs: 60_000 });
        await h.service.setTimeout(info.sandboxId, 200);
        await eventually(
          () => stateOf(h.service, info.sandboxId) === "gone",
          "killed at the new deadline",
        );
        const kept = await create(h, { timeoutMs: 1_000 });
        await h.service.refresh(kept.sandboxId, 60_000);
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        assert.equal(stateOf(h.service, kept.sandboxId), "running", "a refreshed deadline holds");
      });
    });

    describe("kill during create", () => {
      it("a create whose VM is starting ends sandbox_killed, leaving nothing", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "faults")) return;
        const gate = h.faults.holdStarts();
        const creating = create(h);
        creating.catch(() => {});
        const [pending] = await gate.reached();
        assert.ok(pending);
        // The kill aborts the start at once, and returns once the create has unwound.
        const killing = h.service.kill(pending);
        gate.open();
        await killing;
        await assert.rejects(creating, reason("sandbox_killed"));
        assert.throws(() => h.service.get(pending), reason("sandbox_not_found"));
        await assertClean(h);
      });

      it("so does a resume killed while its VM starts", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "faults")) return;
        const info = await create(h);
        await h.service.pause(info.sandboxId);
        const gate = h.faults.holdStarts();
        const resuming = h.service.connect(info.sandboxId, undefined);
        resuming.catch(() => {});
        await gate.reached();
        const killing = h.service.kill(info.sandboxId);
        gate.open();
        await killing;
        await assert.rejects(resuming, reason("sandbox_killed"));
        assert.throws(() => h.service.get(info.sandboxId), reason("sandbox_not_found"));
        await assertClean(h);
      });
    });

    describe("failed pause", () => {
      it("with the VMM still running: the sandbox stays running and can pause later", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "faults")) return;
        const info = await create(h);
        h.faults.failNextPause("error");
        await assert.rejects(h.service.pause(info.sandboxId));
        assert.equal(h.service.get(info.sandboxId).state, "running");
        const connected = await h.service.connect(info.sandboxId, undefined);
        assert.equal(connected.resumed, false);
        await h.service.pause(info.sandboxId);
        assert.equal(h.service.get(info.sandboxId).state, "paused");
      });

      it("with the VMM gone: the sandbox is lost, and everything it held released", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "faults")) return;
        const info = await create(h);
        h.faults.failNextPause("crash");
        await assert.rejects(h.service.pause(info.sandboxId));
        assert.throws(() => h.service.get(info.sandboxId), reason("sandbox_not_found"));
        await assertClean(h);
      });
    });

    describe("resume racing a proxy request", () => {
      it("a request for a paused autoResume sandbox resumes it; one during a resume waits for it", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "router")) return;
        const info = await create(h, { lifecycle: lifecycle({ autoResume: true }) });
        await h.service.pause(info.sandboxId);
        const routed = await h.router.route(info.sandboxId, 8080, anyRequest);
        assert.equal(routed.kind, "ok", "traffic resumed it");
        assert.equal(h.service.get(info.sandboxId).state, "running");

        await h.service.pause(info.sandboxId);
        const gate = h.faults?.holdStarts();
        const connecting = h.service.connect(info.sandboxId, undefined);
        await gate?.reached();
        const racing = h.router.route(info.sandboxId, ENVD_PORT, anyRequest);
        gate?.open();
        const [connected, route] = await Promise.all([connecting, racing]);
        assert.equal(connected.resumed, true);
        assert.equal(route.kind, "ok", "the request waited for the resume, then went through");
        if (route.kind === "ok") assert.equal(route.route.sandboxId, info.sandboxId);
        assert.equal(h.service.get(info.sandboxId).state, "running");
      });

      it("without autoResume a paused sandbox is not found; unknown ids neither", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "router")) return;
        const info = await create(h);
        await h.service.pause(info.sandboxId);
        assert.deepEqual(await h.router.route(info.sandboxId, 8080, anyRequest), {
          kind: "not_found",
        });
        assert.equal(h.service.get(info.sandboxId).state, "paused", "not resumed");
        assert.deepEqual(await h.router.route("nosuchsandbox", 8080, anyRequest), {
          kind: "not_found",
        });
      });

      it("a request that may not wake it leaves it paused; the check is asked before any resume", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "router")) return;
        const info = await create(h, {
          secure: true,
          lifecycle: lifecycle({ autoResume: true }),
          network: { allowOut: [], denyOut: [], allowPublicTraffic: false },
        });
        await h.service.pause(info.sandboxId);
        const asked: RouteAccess[] = [];
        const refuse = (access: RouteAccess) => {
          asked.push(access);
          assert.equal(h.service.get(info.sandboxId).state, "paused", "asked before the resume");
          return false;
        };
        assert.deepEqual(await h.router.route(info.sandboxId, 8080, refuse), {
          kind: "wake_refused",
        });
        assert.deepEqual(await h.router.route(info.sandboxId, ENVD_PORT, refuse), {
          kind: "wake_refused",
        });
        assert.equal(h.service.get(info.sandboxId).state, "paused", "not resumed");
        assert.deepEqual(asked, [
          {
            sandboxId: info.sandboxId,
            allowPublicTraffic: false,
            trafficAccessToken: info.trafficAccessToken,
            envdAccessToken: info.envdAccessToken,
          },
          {
            sandboxId: info.sandboxId,
            allowPublicTraffic: true,
            trafficAccessToken: info.trafficAccessToken,
            envdAccessToken: info.envdAccessToken,
          },
        ]);
      });
    });

    describe("fork of a paused source", () => {
      it("starts children from the pause snapshot; the source stays paused", async (t) => {
        const h = await use(t);
        const source = await create(h, { metadata: { origin: "src", keep: "1" } });
        await h.service.pause(source.sandboxId);
        const results = await h.service.fork(source.sandboxId, {
          count: 3,
          metadata: { origin: "child" },
        });
        assert.equal(results.length, 3);
        const children = results.map((r) => {
          assert.ok("sandbox" in r, `child started: ${JSON.stringify(r)}`);
          return r.sandbox;
        });
        assert.equal(new Set(children.map((c) => c.sandboxId)).size, 3);
        for (const child of children) {
          assert.notEqual(child.sandboxId, source.sandboxId);
          assert.equal(child.state, "running");
          assert.deepEqual(child.metadata, { origin: "child", keep: "1" });
          assert.equal(h.service.get(child.sandboxId).state, "running");
        }
        assert.equal(h.service.get(source.sandboxId).state, "paused");
        for (const child of children) await h.service.kill(child.sandboxId);
        const resumed = await h.service.connect(source.sandboxId, undefined);
        assert.equal(resumed.resumed, true);
        await h.service.kill(source.sandboxId);
        await assertClean(h);
      });

      it("a running source keeps running; counts out of range are invalid_argument", async (t) => {
        const h = await use(t);
        const source = await create(h);
        const [child] = await h.service.fork(source.sandboxId, { count: 1 });
        assert.ok(child && "sandbox" in child);
        assert.equal(h.service.get(source.sandboxId).state, "running");
        for (const count of [0, h.maxForkCount + 1, 1.5]) {
          await assert.rejects(
            h.service.fork(source.sandboxId, { count }),
            reason("invalid_argument"),
          );
        }
      });
    });

    describe("capacity", () => {
      it("a full node refuses creates, resumes and fork children with capacity_exhausted", async (t) => {
        const h = await use(t);
        const running: SandboxInfo[] = [];
        for (let i = 0; i < h.maxSandboxes; i++) running.push(await create(h));
        await assert.rejects(create(h), reason("capacity_exhausted"));

        const [forked] = await h.service.fork((running[0] as SandboxInfo).sandboxId, { count: 1 });
        assert.ok(forked && "error" in forked, "a child over capacity fails alone");
        assert.equal(forked.error.reason, "capacity_exhausted");

        const paused = running.pop() as SandboxInfo;
        await h.service.pause(paused.sandboxId);
        running.push(await create(h));
        await assert.rejects(
          h.service.connect(paused.sandboxId, undefined),
          reason("capacity_exhausted"),
        );
        assert.equal(
          h.service.get(paused.sandboxId).state,
          "paused",
          "a refused resume stays paused",
        );

        await h.service.kill((running.pop() as SandboxInfo).sandboxId);
        await h.service.connect(paused.sandboxId, undefined);
        assert.equal(h.service.get(paused.sandboxId).state, "running");
      });
    });

    describe("restart recovery", () => {
      it("after a crash: paused sandboxes are kept, running ones reported lost", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "restart")) return;
        const running = await create(h);
        const paused = await create(h);
        await h.service.pause(paused.sandboxId);
        await h.restart("crash");
        assert.throws(() => h.service.get(running.sandboxId), reason("sandbox_not_found"));
        assert.equal(h.service.get(paused.sandboxId).state, "paused");
        const { resumed } = await h.service.connect(paused.sandboxId, undefined);
        assert.equal(resumed, true);
        await h.service.kill(paused.sandboxId);
        await assertClean(h);
      });

      it("after a graceful stop: running sandboxes were paused and resume", async (t) => {
        const h = await use(t);
        if (!needs(t, h, "restart")) return;
        const info = await create(h);
        await h.restart("graceful");
        assert.equal(h.service.get(info.sandboxId).state, "paused");
        const { resumed, sandbox } = await h.service.connect(info.sandboxId, undefined);
        assert.equal(resumed, true);
        assert.equal(sandbox.state, "running");
      });
    });

    describe("persistent snapshots", () => {
      it("a named snapshot is a template: listed, created from, deletable once unused", async (t) => {
        const h = await use(t);
        const source = await create(h);
        const snapshot = await h.service.createSnapshot(source.sandboxId, { name: "golden" });
        assert.equal(snapshot.snapshotId, "golden:default");
        assert.deepEqual(snapshot.names, ["golden:default"]);
        assert.equal(h.service.get(source.sandboxId).state, "running", "the source keeps running");
        const listed = await h.service.listSnapshots({ sandboxId: source.sandboxId });
        assert.deepEqual(
          listed.map((s) => s.snapshotId),
          ["golden:default"],
        );
        assert.deepEqual(
          (await h.service.listSnapshots({ name: "golden" })).map((s) => s.templateId),
          [snapshot.templateId],
        );
        await assert.rejects(
          h.service.createSnapshot(source.sandboxId, { name: "golden" }),
          reason("template_name_taken"),
        );
        await assert.rejects(
          h.service.createSnapshot(source.sandboxId, { name: "Not A Name" }),
          reason("invalid_argument"),
        );

        const fromSnapshot = await h.service.create(createInput("golden:default"));
        assert.equal(fromSnapshot.state, "running");
        await assert.rejects(h.service.deleteTemplate("golden"), reason("template_in_use"));
        await h.service.kill(fromSnapshot.sandboxId);
        await h.service.deleteTemplate("golden");
        assert.deepEqual(await h.service.listSnapshots({ name: "golden" }), []);
        await assert.rejects(h.service.deleteTemplate("golden"), reason("template_not_found"));
        await assert.rejects(h.service.deleteTemplate(h.templateId), reason("template_protected"));
      });

      it("names are per team: each team's `golden` is its own, another team's reads as unknown", async (t) => {
        const h = await use(t);
        const team = (teamId: string) => ({ teamId });
        const sourceA = await create(h, team("team-a"));
        const sourceB = await create(h, team("team-b"));
        const a = await h.service.createSnapshot(sourceA.sandboxId, { name: "golden" });
        const b = await h.service.createSnapshot(sourceB.sandboxId, { name: "golden" });
        assert.notEqual(a.templateId, b.templateId);
        assert.equal(b.snapshotId, "golden:default");
        // The built-in template's name is no team's to take.
        await assert.rejects(
          h.service.createSnapshot(sourceB.sandboxId, { name: h.templateId }),
          reason("template_name_taken"),
        );
        await h.service.kill(sourceA.sandboxId);
        await h.service.kill(sourceB.sandboxId);
        const fromA = await h.service.create(createInput("golden", team("team-a")));
        const fromB = await h.service.create(createInput("golden:default", team("team-b")));
        assert.equal(fromA.templateId, a.templateId);
        assert.equal(fromB.templateId, b.templateId);
        await assert.rejects(
          h.service.create(createInput("golden", team("team-c"))),
          reason("template_not_found"),
        );
        const named = (teamId: string) =>
          h.service
            .listSnapshots({ name: "golden", teamId })
            .then((l) => l.map((s) => s.templateId));
        assert.deepEqual(await named("team-a"), [a.templateId]);
        assert.deepEqual(await named("team-b"), [b.templateId]);
        assert.deepEqual(await named("team-c"), []);
      });
    });

    it("updateNetwork refuses a bad CIDR with invalid_argument and keeps the sandbox", async (t) => {
      const h = await use(t);
      const info = await create(h);
      await assert.rejects(
        h.service.updateNetwork(info.sandboxId, { allowOut: ["10.0.0.0/33"] }),
        reason("invalid_argument"),
      );
      await h.service.updateNetwork(info.sandboxId, { allowOut: ["10.1.0.0/16"], denyOut: [] });
      assert.deepEqual(h.service.get(info.sandboxId).network.allowOut, ["10.1.0.0/16"]);
      assert.equal(h.service.get(info.sandboxId).state, "running");
    });
  });
}
