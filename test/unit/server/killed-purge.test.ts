// The periodic purge of killed sandboxes' secrets, on the in-memory catalog: one sweep at
// start, then one every interval, each forgetting what was killed longer than the retention ago.
import assert from "node:assert/strict";
import { test } from "node:test";
import { startKilledPurge } from "../../../src/server/killed-purge.js";
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
  assert.equal(logger.events("catalog.killed_purge_failed")[0]?.fields.err, "disk I/O error");
});
