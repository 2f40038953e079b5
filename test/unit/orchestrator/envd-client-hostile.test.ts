// The host's envd client as the orchestrator uses it (EnvdGuestAgent on EnvdClient) against a
// hostile envd: a guest's root user may replace envd with a server that streams forever,
// trickles, sends huge heads or bodies, or never answers. Every call must fail within its
// bound with a clear error, read no more than its limit, hang up on the guest, and end at once
// when its signal aborts (a kill).
// No VM: the stand-in listens on a loopback address of its own, on envd's port.
import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import { ENVD_REPLY_MAX_BYTES } from "../../../src/orchestrator/guest/envd-client.js";
import {
  EnvdGuestAgent,
  METRICS_TIMEOUT_MS,
  parseMetrics,
} from "../../../src/orchestrator/guest/envd-guest-agent.js";
import { WarrenError } from "../../../src/shared/index.js";
import { failsWithin, HostileEnvd, type HostileMode } from "../../helpers/hostile-envd.js";

const client = new EnvdGuestAgent();
/** Slack over a bound for timers and a busy 2-core machine. */
const SLACK_MS = 1_500;

async function hostile(t: TestContext, mode: HostileMode, intervalMs?: number) {
  const envd = await HostileEnvd.start({ mode, intervalMs });
  t.after(() => envd.close());
  return envd;
}

const init = (host: string, deadlineMs: number, signal?: AbortSignal) =>
  client.init(host, { envVars: {} }, { deadlineMs, signal });

describe("EnvdGuestAgent against a hostile envd", () => {
  it("a healthy stand-in answers every call (the helper plays envd)", async (t) => {
    const envd = await hostile(t, "healthy");
    await init(envd.host, 2_000);
    await client.waitForHealth(envd.host, { deadlineMs: 2_000 });
    const metrics = await client.metrics(envd.host);
    assert.equal(metrics.cpu_count, 1);
  });

  describe("/init", () => {
    it("/init to an envd that never answers fails at its deadline and hangs up", async (t) => {
      const envd = await hostile(t, "silent");
      const err = await failsWithin(500 + SLACK_MS, "guest_unavailable", () =>
        init(envd.host, 500),
      );
      assert.match(err.message, /within 500 ms/);
      await envd.allClosed();
    });

    it("/init to an envd that accepts then hangs (never reads) fails at its deadline", async (t) => {
      const envd = await hostile(t, "stalled");
      await failsWithin(500 + SLACK_MS, "guest_unavailable", () => init(envd.host, 500));
      await envd.allClosed();
    });

    it("/init to an envd trickling its head one byte a second fails at its deadline", async (t) => {
      const envd = await hostile(t, "trickle", 100);
      await failsWithin(1_000 + SLACK_MS, "guest_unavailable", () => init(envd.host, 1_000));
      assert.ok(envd.bytesSent > 0, "the guest was trickling");
      await envd.allClosed();
    });

    it("/init to an envd sending huge headers fails at once, reading a bounded head", async (t) => {
      const envd = await hostile(t, "huge-headers");
      const err = await failsWithin(SLACK_MS, "guest_reply_invalid", () => init(envd.host, 10_000));
      assert.match(err.message, /head over 16384 bytes/);
      await envd.allClosed();
      // What the host took before hanging up: its head limit plus socket buffers, not more.
      assert.ok(envd.bytesSent < 16 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
    });

    it("/init to an envd streaming an endless body is cut past the body limit", async (t) => {
      const envd = await hostile(t, "endless");
      const err = await failsWithin(SLACK_MS, "guest_reply_invalid", () => init(envd.host, 10_000));
      assert.match(err.message, new RegExp(`body over ${ENVD_REPLY_MAX_BYTES} bytes`));
      await envd.allClosed();
      assert.ok(envd.bytesSent < 16 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
    });

    it("/init to an envd sending a huge body is cut past the body limit", async (t) => {
      const envd = await hostile(t, "huge-body");
      await failsWithin(SLACK_MS, "guest_reply_invalid", () => init(envd.host, 10_000));
      await envd.allClosed();
      assert.ok(envd.bytesSent < 16 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
    });

    it("/init in flight is aborted at once by its signal (a kill), not at its deadline", async (t) => {
      const envd = await hostile(t, "silent");
      const kill = new AbortController();
      setTimeout(() => kill.abort(new Error("killed")), 200);
      const err = await failsWithin(200 + 500, undefined, () =>
        init(envd.host, 60_000, kill.signal),
      );
      assert.equal(err.message, "killed");
      await envd.allClosed();
    });
  });

  describe("/metrics", () => {
    it("/metrics to an envd that never answers fails within its bound", async (t) => {
      const envd = await hostile(t, "silent");
      const err = await failsWithin(METRICS_TIMEOUT_MS + SLACK_MS, "guest_unavailable", () =>
        client.metrics(envd.host),
      );
      assert.match(err.message, /envd GET \/metrics: no complete answer/);
      await envd.allClosed();
    });

    it("/metrics to an envd trickling its head fails within its bound (no idle timer to reset)", async (t) => {
      const envd = await hostile(t, "trickle", 50);
      await failsWithin(METRICS_TIMEOUT_MS + SLACK_MS, "guest_unavailable", () =>
        client.metrics(envd.host),
      );
      await envd.allClosed();
    });

    it("/metrics to an envd sending an endless body fails at once", async (t) => {
      const envd = await hostile(t, "endless");
      await failsWithin(SLACK_MS, "guest_reply_invalid", () => client.metrics(envd.host));
      await envd.allClosed();
    });

    it("/metrics in flight is aborted at once by its signal (a kill or a pause)", async (t) => {
      const envd = await hostile(t, "trickle-body", 50);
      const stop = new AbortController();
      setTimeout(() => stop.abort(new Error("sandbox stopped")), 100);
      await failsWithin(100 + 500, undefined, () =>
        client.metrics(envd.host, undefined, stop.signal),
      );
      await envd.allClosed();
    });

    it("/metrics that are not numbers are refused, not handed to API clients", () => {
      const good = {
        ts: 1,
        cpu_count: 1,
        cpu_used_pct: 1,
        mem_total: 1,
        mem_used: 1,
        mem_cache: 1,
        mem_total_mib: 1,
        mem_used_mib: 1,
        disk_used: 1,
        disk_total: 1,
      };
      const parsed = parseMetrics(Buffer.from(JSON.stringify({ ...good, extra: "x".repeat(99) })));
      assert.deepEqual(parsed, good, "extra fields are dropped");
      for (const bad of ["not json", "null", JSON.stringify({ ...good, cpu_count: "1" })]) {
        assert.throws(
          () => parseMetrics(Buffer.from(bad)),
          (err: unknown) => err instanceof WarrenError && err.reason === "guest_reply_invalid",
        );
      }
    });
  });

  describe("/health", () => {
    it("/health polls against a trickling envd end at their deadline", async (t) => {
      const envd = await hostile(t, "trickle", 50);
      await failsWithin(1_000 + SLACK_MS, "guest_unavailable", () =>
        client.waitForHealth(envd.host, { deadlineMs: 1_000 }),
      );
      await envd.allClosed();
    });

    it("/health polls against an envd sending huge headers fail at once", async (t) => {
      const envd = await hostile(t, "huge-headers");
      await failsWithin(SLACK_MS, "guest_reply_invalid", () =>
        client.waitForHealth(envd.host, { deadlineMs: 30_000 }),
      );
      await envd.allClosed();
    });

    it("/health polls end at once when their signal aborts", async (t) => {
      const envd = await hostile(t, "silent");
      const stop = new AbortController();
      setTimeout(() => stop.abort(new Error("pool closed")), 100);
      await failsWithin(100 + 500, undefined, () =>
        client.waitForHealth(envd.host, { deadlineMs: 60_000, signal: stop.signal }),
      );
      await envd.allClosed();
    });
  });

  describe("the warm-up walk (exercise)", () => {
    it("a walk whose process stream never ends is aborted by its signal, memory bounded", async (t) => {
      const envd = await hostile(t, "connect-endless");
      const stop = new AbortController();
      setTimeout(() => stop.abort(new Error("pool closed")), 1_000);
      const before = process.memoryUsage().arrayBuffers;
      await failsWithin(1_000 + SLACK_MS, undefined, () =>
        client.exercise(envd.host, undefined, stop.signal),
      );
      assert.ok(envd.requests.includes("POST /process.Process/Start"), "the stream was reached");
      assert.ok(envd.bytesSent > 1024 * 1024, "the stream was read as it came");
      // Drained and dropped as it came: nothing of the stream is held.
      const held = process.memoryUsage().arrayBuffers - before;
      assert.ok(held < 64 * 1024 * 1024, `${held} bytes still held`);
      await envd.allClosed();
    });

    it("a walk whose process stream sends a 1 GiB message fails at once", async (t) => {
      const envd = await hostile(t, "connect-huge-message");
      const err = await failsWithin(SLACK_MS, undefined, () => client.exercise(envd.host));
      assert.match(err.message, /message size .* is larger than configured readMaxBytes/);
      await envd.allClosed();
      assert.ok(envd.bytesSent < 32 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
    });

    it("a walk whose envd never answers /init ends when its signal aborts", async (t) => {
      const envd = await hostile(t, "silent");
      const stop = new AbortController();
      setTimeout(() => stop.abort(new Error("pool closed")), 100);
      await failsWithin(100 + 500, undefined, () =>
        client.exercise(envd.host, undefined, stop.signal),
      );
      await envd.allClosed();
    });
  });
});
