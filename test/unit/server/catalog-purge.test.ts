// The catalog's periodic purges, on the in-memory catalog: one sweep at start, then one every
// interval, each forgetting killed sandboxes' secrets, or events, older than the retention.
import assert from "node:assert/strict";
import { test } from "node:test";
import { startEventsPurge, startKilledPurge } from "../../../src/server/catalog-purge.js";
import { sandboxRow } from "../../contracts/catalog.contract.js";
import { RecordingLogger } from "../../fakes/fake-node.js";
import { InMemoryCatalog } from "../../fakes/in-memory-catalog.js";

const secrets = { envdAccessToken: "tok", envVars: { KEY: "secret" } };

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("killed purge: secrets of sandboxes killed before the retention go at start, later ones once they age", async (t) => {
  const catalog = new InMemoryCatalog();
  const longAgo = new Date(Date.now() - 3_600_000).toISOString();
  await catalog.insertSandbox(
    sandboxRow({ id: "old", state: "killed", updatedAt: longAgo, ...secrets }),
  );
  await catalog.insertSandbox(sandboxRow({ id: "live", ...secrets }));
  const logger = new RecordingLogger();
  const purge = startKilledPurge(catalog, { retentionMs: 300, intervalMs: 25, logger });
  t.after(() => purge.stop());

  await until(
    async () => (await catalog.getSandbox("old"))?.envdAccessToken === undefined,
    "the sweep at start",
  );
  assert.deepEqual((await catalog.getSandbox("old"))?.envVars, {});
  assert.equal(logger.events("catalog.killed_secrets_purged")[0]?.fields.purged, 1);

  // Killed now: kept for the retention, then gone at a later sweep without any call.
  const killedAt = Date.now();
  await catalog.updateSandbox("live", { state: "killed", endedReason: "killed" });
  assert.equal((await catalog.getSandbox("live"))?.envdAccessToken, "tok");
  await until(
    async () => (await catalog.getSandbox("live"))?.envdAccessToken === undefined,
    "the periodic sweep",
  );
  assert.ok(Date.now() - killedAt >= 300, "not before the retention");
  assert.deepEqual((await catalog.getSandbox("live"))?.envVars, {});
});

test("killed purge: a failing sweep is logged and the next one runs", async () => {
  let calls = 0;
  const logger = new RecordingLogger();
  const purge = startKilledPurge(
    {
      purgeKilledSecrets: async () => {
        calls++;
        if (calls === 1) throw new Error("disk I/O error");
        return 0;
      },
    },
    { retentionMs: 0, intervalMs: 10, logger },
  );
  await until(async () => calls >= 2, "a second sweep");
  await purge.stop();
  assert.equal(
    logger.events("catalog.killed_secrets_purge_failed")[0]?.fields.err,
    "disk I/O error",
  );
});

test("events purge: history and lifecycle events older than the retention go, newer ones stay", async (t) => {
  const catalog = new InMemoryCatalog();
  await catalog.insertSandbox(sandboxRow({ id: "sb" }));
  const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
  const lifecycle = "sandbox.lifecycle.created";
  await catalog.recordEvent({
    at: ago(3_600_000),
    sandboxId: "sb",
    kind: "sandbox.created",
    lifecycle,
  });
  await catalog.recordEvent({ at: ago(0), sandboxId: "sb", kind: "sandbox.paused" });
  const logger = new RecordingLogger();
  const purge = startEventsPurge(catalog, { retentionMs: 60_000, intervalMs: 25, logger });
  t.after(() => purge.stop());
  await until(async () => (await catalog.listEvents("sb")).length === 1, "the sweep at start");
  assert.equal((await catalog.listEvents("sb"))[0]?.kind, "sandbox.paused");
  assert.equal(logger.events("catalog.events_purged")[0]?.fields.purged, 1);
  const page = { teamId: "team-a", offset: 0, limit: 10, ascending: true };
  assert.deepEqual(await catalog.listLifecycleEvents(page), []);
});
