// A real guest whose root user replaced envd (test/helpers/hostile-guest.ts: envd's own
// listening socket taken over, envd frozen) against the real server: every host call to it
// ends within its bound, the proxy cuts it at its limits, a kill during its resume is prompt,
// and another sandbox on the node is not affected.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import {
  type GuestHostileMode,
  HOSTILE_CONTROL_PORT,
  replaceEnvd,
} from "../helpers/hostile-guest.js";
import { api, useServer, waitFor } from "../helpers/server.js";

const PROXY_HEAD_TIMEOUT_MS = 3_000;
/** EnvdGuestAgent's METRICS_TIMEOUT_MS, plus the API's own time on a busy host. */
const METRICS_BOUND_MS = 5_000 + 2_000;

const server = useServer({
  WARREN_POOL_SIZE: "0",
  WARREN_POOL_MAX_PER_TEMPLATE: "0",
  WARREN_PROXY_HEAD_TIMEOUT_MS: String(PROXY_HEAD_TIMEOUT_MS),
});

let hostile: Sandbox;

/** A request through the sandbox proxy to one of the hostile sandbox's ports. */
function proxied(port: number, path: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}${path}`, {
    headers: { "e2b-sandbox-id": hostile.sandboxId, "e2b-sandbox-port": String(port) },
    signal,
  });
}

async function setMode(mode: GuestHostileMode): Promise<void> {
  const res = await proxied(HOSTILE_CONTROL_PORT, `/${mode}`);
  assert.equal(await res.text(), mode);
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  const value = await work();
  return { ms: performance.now() - started, value };
}

describe("a real guest whose envd was replaced by a hostile server", () => {
  before(async () => {
    hostile = await Sandbox.create();
    await replaceEnvd(hostile);
    try {
      await waitFor(
        "the hostile server to take envd's place",
        async () => {
          const res = await proxied(HOSTILE_CONTROL_PORT, "/silent").catch(() => undefined);
          return res?.status === 200 && (await res.text()) === "silent";
        },
        30_000,
      );
    } catch (err) {
      // envd still answers if the script failed before freezing it: say why.
      const log = await hostile.commands
        .run("cat /tmp/hostile.log; ss -ltnp", { user: "root", timeoutMs: 5_000 })
        .then(
          (r) => r.stdout,
          (e: unknown) => String(e),
        );
      throw new Error(`${(err as Error).message}\n${log}`);
    }
  });
  after(async () => {
    await hostile?.kill().catch(() => {});
  });

  for (const mode of ["silent", "trickle", "huge-headers"] as const) {
    it(`metrics of a guest whose envd is ${mode} fail within their bound`, async (t) => {
      await setMode(mode);
      const { ms, value } = await timed(() =>
        api(server, "GET", `/sandboxes/${hostile.sandboxId}/metrics`),
      );
      assert.equal(value.status, 503, JSON.stringify(value.body));
      assert.ok(ms < METRICS_BOUND_MS, `took ${Math.round(ms)} ms`);
      t.diagnostic(`metrics failed after ${Math.round(ms)} ms`);
    });
  }

  it("the proxy cuts a trickled head at its head timeout and refuses a huge head", async (t) => {
    await setMode("trickle");
    const trickled = await timed(() => proxied(49983, "/health"));
    assert.equal(trickled.value.status, 504);
    assert.ok(trickled.ms < PROXY_HEAD_TIMEOUT_MS + 2_000, `took ${Math.round(trickled.ms)} ms`);
    await setMode("huge-headers");
    const huge = await timed(() => proxied(49983, "/health"));
    assert.equal(huge.value.status, 502);
    assert.ok(huge.ms < 2_000, `took ${Math.round(huge.ms)} ms`);
    t.diagnostic(
      `trickled head cut after ${Math.round(trickled.ms)} ms, huge head ${Math.round(huge.ms)} ms`,
    );
  });

  it("another sandbox runs commands unaffected while the hostile one floods its clients", async (t) => {
    await setMode("endless");
    const stop = new AbortController();
    const flood = await proxied(49983, "/files", stop.signal);
    let flooded = 0;
    const draining = (async () => {
      for await (const chunk of flood.body as unknown as AsyncIterable<Uint8Array>) {
        flooded += chunk.length;
      }
    })().catch(() => {});
    const healthy = await Sandbox.create();
    try {
      const { ms, value } = await timed(() => healthy.commands.run("echo fine"));
      assert.equal(value.stdout, "fine\n");
      assert.ok(ms < 10_000, `a command took ${Math.round(ms)} ms beside the flood`);
      assert.ok(flooded > 1024 * 1024, `the flood ran: ${flooded} bytes`);
      t.diagnostic(`command ${Math.round(ms)} ms beside a flood of ${flooded} bytes`);
    } finally {
      stop.abort();
      await draining;
      await healthy.kill();
    }
  });

  it("a pause works, and a kill while its resume waits on the hostile /init is prompt", async (t) => {
    await setMode("silent");
    assert.equal((await api(server, "POST", `/sandboxes/${hostile.sandboxId}/pause`)).status, 204);
    const resuming = api(server, "POST", `/sandboxes/${hostile.sandboxId}/connect`, {
      timeout: 60,
    });
    // A restore takes well under a second here: after 2 s the resume waits on /init.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const kill = await timed(() => api(server, "DELETE", `/sandboxes/${hostile.sandboxId}`));
    assert.equal(kill.value.status, 204);
    assert.ok(kill.ms < 2_000, `the kill took ${Math.round(kill.ms)} ms`);
    t.diagnostic(`the kill took ${Math.round(kill.ms)} ms`);
    const resumed = await resuming;
    assert.equal(resumed.status, 409, JSON.stringify(resumed.body));
    assert.match(String((resumed.body as { message?: string }).message), /killed/);
  });
});
