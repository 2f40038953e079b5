import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type { Catalog, TeamCatalog, WebhookCatalog, WebhookRow } from "../../src/catalog/index.js";
import { sandboxRow } from "./catalog.contract.js";

/** A fresh, migrated catalog per test: its webhooks, and the events that queue deliveries. */
export interface WebhooksHarness {
  catalog: Catalog;
  webhooks: WebhookCatalog;
  teams: TeamCatalog;
  cleanup: () => Promise<void>;
}

const T0 = "2020-01-01T00:00:00.000Z";
const CREATED = "sandbox.lifecycle.created";
const PAUSED = "sandbox.lifecycle.paused";
const KILLED = "sandbox.lifecycle.killed";

function webhook(over: Partial<WebhookRow> & { id: string }): WebhookRow {
  return {
    teamId: "team-a",
    name: over.id,
    url: `https://hooks.example.com/${over.id}`,
    enabled: true,
    events: [CREATED, KILLED],
    sealedSecret: `sealed-${over.id}`,
    createdAt: T0,
    updatedAt: T0,
    failures: 0,
    ...over,
  };
}

/** What every WebhookCatalog (SQLite, PostgreSQL) must do, with its catalog's events. */
export function webhooksContract(name: string, open: () => Promise<WebhooksHarness>): void {
  const use = async (t: TestContext) => {
    const harness = await open();
    t.after(() => harness.cleanup());
    for (const id of ["team-a", "team-b"]) {
      await harness.teams.putTeam({ id, name: id, createdAt: T0, limits: {} });
    }
    return harness;
  };
  const at = (second: number) => new Date(Date.now() - 60_000 + second * 1000).toISOString();
  async function life(catalog: Catalog, sandboxId: string, teamId = "team-a"): Promise<void> {
    await catalog.insertSandbox(sandboxRow({ id: sandboxId, teamId }));
    for (const [second, kind, lifecycle] of [
      [1, "sandbox.created", CREATED],
      [2, "sandbox.paused", PAUSED],
      [3, "sandbox.killed", KILLED],
    ] as const) {
      await catalog.recordEvent({ at: at(second), sandboxId, kind, lifecycle });
    }
  }

  describe(`WebhookCatalog contract: ${name}`, () => {
    it("inserts, gets (its team's only), lists oldest first, patches and deletes", async (t) => {
      const { webhooks } = await use(t);
      await webhooks.insertWebhook(webhook({ id: "w1" }));
      await webhooks.insertWebhook(webhook({ id: "w2", createdAt: "2030-01-01T00:00:01.000Z" }));
      await webhooks.insertWebhook(webhook({ id: "w3", teamId: "team-b" }));
      assert.deepEqual(await webhooks.getWebhook("team-a", "w1"), webhook({ id: "w1" }));
      assert.equal(await webhooks.getWebhook("team-b", "w1"), undefined);
      assert.deepEqual(
        (await webhooks.listWebhooks("team-a")).map((w) => w.id),
        ["w1", "w2"],
      );
      const patched = await webhooks.updateWebhook("team-a", "w1", {
        enabled: false,
        events: [KILLED],
      });
      assert.equal(patched?.enabled, false);
      assert.deepEqual(patched?.events, [KILLED]);
      assert.equal(patched?.url, webhook({ id: "w1" }).url, "what was not given stays");
      assert.ok((patched?.updatedAt ?? T0) > T0);
      assert.deepEqual(await webhooks.getWebhook("team-a", "w1"), patched);
      assert.equal(await webhooks.updateWebhook("team-b", "w1", { name: "x" }), undefined);
      assert.equal(await webhooks.deleteWebhook("team-b", "w1"), false);
      assert.equal(await webhooks.deleteWebhook("team-a", "w1"), true);
      assert.equal(await webhooks.getWebhook("team-a", "w1"), undefined);
    });

    it("queues a delivery per event for each enabled webhook of the team listing its type", async (t) => {
      const { catalog, webhooks } = await use(t);
      await webhooks.insertWebhook(webhook({ id: "w1" }));
      await webhooks.insertWebhook(webhook({ id: "off", enabled: false }));
      await webhooks.insertWebhook(webhook({ id: "other", teamId: "team-b" }));
      await life(catalog, "sb-1");
      const first = await webhooks.claimDeliveries(10, 60_000);
      assert.equal(first.length, 1, "the oldest of the sandbox only: in order");
      const [created] = first;
      assert.equal(created?.webhook.id, "w1");
      assert.equal(created?.webhook.url, "https://hooks.example.com/w1");
      assert.equal(created?.webhook.sealedSecret, "sealed-w1");
      assert.equal(created?.event.lifecycle, CREATED);
      assert.equal(created?.event.sandbox.id, "sb-1");
      assert.equal(created?.attempts, 0);
      assert.deepEqual(await webhooks.claimDeliveries(10, 60_000), [], "leased: not again");

      // Not delivered: queued again, and it stays first.
      const failed = { at: at(4), delivered: false, status: 500 };
      await webhooks.settleDelivery(created?.id ?? "", failed, at(0));
      const again = await webhooks.claimDeliveries(10, 60_000);
      assert.deepEqual(
        again.map((d) => [d.id, d.attempts]),
        [[created?.id, 1]],
      );
      assert.deepEqual((await webhooks.getWebhook("team-a", "w1"))?.lastDelivery, failed);
      assert.equal((await webhooks.getWebhook("team-a", "w1"))?.failures, 0, "not given up");

      // Given up: the next of the sandbox comes (killed: paused is not listed).
      await webhooks.settleDelivery(created?.id ?? "", failed);
      assert.equal((await webhooks.getWebhook("team-a", "w1"))?.failures, 1);
      const [killed] = await webhooks.claimDeliveries(10, 60_000);
      assert.equal(killed?.event.lifecycle, KILLED);
      const ok = { at: at(5), delivered: true, status: 204 };
      await webhooks.settleDelivery(killed?.id ?? "", ok);
      const after = await webhooks.getWebhook("team-a", "w1");
      assert.deepEqual([after?.lastDelivery, after?.failures], [ok, 0]);
      assert.deepEqual(await webhooks.claimDeliveries(10, 60_000), []);
    });

    it("serves sandboxes side by side, drops what a deleted webhook or a purged event owed", async (t) => {
      const { catalog, webhooks } = await use(t);
      await webhooks.insertWebhook(webhook({ id: "w1" }));
      await life(catalog, "sb-1");
      await life(catalog, "sb-2");
      const both = await webhooks.claimDeliveries(10, 60_000);
      assert.deepEqual(both.map((d) => d.event.sandbox.id).sort(), ["sb-1", "sb-2"]);
      assert.deepEqual(
        (await webhooks.claimDeliveries(10, 1)).length,
        0,
        "the later ones wait behind the leased first ones",
      );
      await catalog.purgeEvents(at(2));
      for (const delivery of both) await webhooks.settleDelivery(delivery.id, refused(), at(0));
      // The created events are purged: their deliveries go; the killed ones remain.
      const left = await webhooks.claimDeliveries(10, 60_000);
      assert.deepEqual(
        left.map((d) => d.event.lifecycle),
        [KILLED, KILLED],
      );
      assert.equal(await webhooks.deleteWebhook("team-a", "w1"), true);
      await webhooks.insertWebhook(webhook({ id: "w2" }));
      assert.deepEqual(await webhooks.claimDeliveries(10, 60_000), [], "nothing of w1's left");
    });
  });

  function refused() {
    return { at: new Date().toISOString(), delivered: false, error: "connection refused" };
  }
}
