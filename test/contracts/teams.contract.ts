import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import {
  type ApiKeyRow,
  DEFAULT_TEAM_ID,
  type TeamCatalog,
  type TeamRow,
} from "../../src/catalog/index.js";

/** A fresh, migrated team catalog per test, and how to remove it. */
export interface TeamsHarness {
  teams: TeamCatalog;
  cleanup: () => Promise<void>;
}

const T0 = "2030-01-01T00:00:00.000Z";

function team(over: Partial<TeamRow> & { id: string }): TeamRow {
  return { name: over.id, createdAt: T0, limits: {}, ...over };
}

function key(over: Partial<ApiKeyRow> & { id: string; teamId: string }): ApiKeyRow {
  return {
    name: "ci",
    hash: `hash-${over.id}`,
    mask: { prefix: "e2b_", valueLength: 40, maskedValuePrefix: "ab", maskedValueSuffix: "wxyz" },
    createdAt: T0,
    ...over,
  };
}

/** What every TeamCatalog (SQLite, PostgreSQL, the in-memory fake) must do. */
export function teamsContract(name: string, open: () => Promise<TeamsHarness>): void {
  const use = async (t: TestContext) => {
    const harness = await open();
    t.after(() => harness.cleanup());
    return harness.teams;
  };

  describe(`TeamCatalog contract: ${name}`, () => {
    it("starts with the default team, which existing rows belong to", async (t) => {
      const teams = await use(t);
      assert.deepEqual(
        (await teams.listTeams()).map((row) => row.id),
        [DEFAULT_TEAM_ID],
      );
    });

    it("puts, replaces name and limits (keeping createdAt), lists and deletes teams", async (t) => {
      const teams = await use(t);
      const a = team({
        id: "team-a",
        limits: { maxSandboxes: 2, maxDiskGiB: 10, maxUploadBytes: 1_000_000 },
      });
      await teams.putTeam(a);
      assert.deepEqual(await teams.getTeam("team-a"), a);
      await teams.putTeam({
        ...a,
        name: "renamed",
        limits: {},
        createdAt: "2031-01-01T00:00:00.000Z",
      });
      assert.deepEqual(await teams.getTeam("team-a"), { ...a, name: "renamed", limits: {} });
      assert.ok((await teams.listTeams()).some((row) => row.id === "team-a"));
      await teams.deleteTeam("team-a");
      assert.equal(await teams.getTeam("team-a"), undefined);
    });

    it("finds a key by its hash only; a deleted team's keys go with it at once", async (t) => {
      const teams = await use(t);
      await teams.putTeam(team({ id: "team-a" }));
      const k = key({ id: "k-1", teamId: "team-a" });
      await teams.insertApiKey(k);
      assert.deepEqual(await teams.findApiKeyByHash("hash-k-1"), k);
      assert.equal(await teams.findApiKeyByHash("hash-nope"), undefined);
      await teams.deleteTeam("team-a");
      assert.equal(await teams.findApiKeyByHash("hash-k-1"), undefined);
    });

    it("refuses a second key with the same hash", async (t) => {
      const teams = await use(t);
      await teams.putTeam(team({ id: "team-a" }));
      await teams.insertApiKey(key({ id: "k-1", teamId: "team-a", hash: "same" }));
      await assert.rejects(
        teams.insertApiKey(key({ id: "k-2", teamId: "team-a", hash: "same" })),
        (err: { reason?: string }) => err.reason === "already_exists",
      );
    });

    it("lists, renames, stamps and deletes a team's keys, never another team's", async (t) => {
      const teams = await use(t);
      await teams.putTeam(team({ id: "team-a" }));
      await teams.putTeam(team({ id: "team-b" }));
      await teams.insertApiKey(
        key({ id: "k-2", teamId: "team-a", createdAt: "2030-01-02T00:00:00.000Z" }),
      );
      await teams.insertApiKey(key({ id: "k-1", teamId: "team-a" }));
      await teams.insertApiKey(key({ id: "k-3", teamId: "team-b" }));
      assert.deepEqual(
        (await teams.listApiKeys("team-a")).map((row) => row.id),
        ["k-1", "k-2"],
      );
      assert.equal(await teams.updateApiKey("team-b", "k-1", { name: "x" }), undefined);
      assert.equal(await teams.deleteApiKey("team-b", "k-1"), false);
      const used = "2030-03-01T00:00:00.000Z";
      const renamed = await teams.updateApiKey("team-a", "k-1", { name: "prod" });
      assert.equal(renamed?.name, "prod");
      const stamped = await teams.updateApiKey("team-a", "k-1", { lastUsedAt: used });
      assert.deepEqual([stamped?.name, stamped?.lastUsedAt], ["prod", used]);
      assert.equal(await teams.deleteApiKey("team-a", "k-1"), true);
      assert.equal(await teams.findApiKeyByHash("hash-k-1"), undefined);
      assert.ok(await teams.findApiKeyByHash("hash-k-3"));
    });
  });
}
