import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type {
  BuildRow,
  Catalog,
  EventRow,
  LifecycleEventRow,
  SandboxRow,
  SnapshotRow,
  TeamAdmit,
  TeamUsage,
  TemplateRow,
} from "../../src/catalog/index.js";
import { WarrenError } from "../../src/shared/index.js";

/** What an implementation's test file hands the suite: a fresh, empty catalog per test. */
export interface CatalogHarness {
  catalog: Catalog;
  /** Closes `catalog` and opens the same store again; absent for stores that do not persist. */
  reopen?: () => Promise<Catalog>;
  /**
   * Another node's catalog on the same store (PostgreSQL: the same database, another node
   * id); absent for a store only one node writes.
   */
  peer?: () => Promise<Catalog>;
  /** Closes every catalog the harness opened and removes the store. */
  cleanup: () => Promise<void>;
}

const T0 = "2030-01-01T00:00:00.000Z";

export function sandboxRow(over: Partial<SandboxRow> & { id: string }): SandboxRow {
  return {
    teamId: "team-a",
    templateId: "tpl-base",
    state: "running",
    clientId: "client-1",
    vcpus: 2,
    memoryMiB: 512,
    diskSizeMiB: 2048,
    metadata: {},
    envVars: {},
    config: {},
    startedAt: T0,
    endAt: "2030-01-01T00:05:00.000Z",
    updatedAt: T0,
    ...over,
  };
}

function templateRow(over: Partial<TemplateRow> & { id: string }): TemplateRow {
  return {
    aliases: [],
    kind: "snapshot",
    snapshotId: "snap-0",
    vcpus: 1,
    memoryMiB: 256,
    diskSizeMiB: 1024,
    createdAt: T0,
    ...over,
  };
}

function buildRow(over: Partial<BuildRow> & { id: string }): BuildRow {
  return {
    teamId: "team-a",
    templateId: "tpl-1",
    name: "my-env",
    tags: ["default"],
    status: "building",
    vcpus: 2,
    memoryMiB: 512,
    diskSizeMiB: 2048,
    layers: [],
    createdAt: T0,
    updatedAt: T0,
    ...over,
  };
}

function snapshotRow(over: Partial<SnapshotRow> & { id: string }): SnapshotRow {
  return {
    dir: `/var/lib/warren/snapshots/${over.id}`,
    kind: "pause",
    names: [],
    imagesFingerprint: "fp-1",
    createdAt: T0,
    ...over,
  };
}

const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

/** Registers the behaviour every Catalog must have; run it from each implementation's test. */
export function catalogContract(name: string, open: () => Promise<CatalogHarness>): void {
  async function use(t: TestContext): Promise<CatalogHarness> {
    const harness = await open();
    t.after(harness.cleanup);
    return harness;
  }

  describe(`Catalog contract: ${name}`, () => {
    describe("sandboxes", () => {
      it("returns an inserted row as written, leaving unset optional fields absent", async (t) => {
        const { catalog } = await use(t);
        const row = sandboxRow({ id: "sb-1" });
        await catalog.insertSandbox(row);
        const got = await catalog.getSandbox("sb-1");
        assert.deepEqual(got, row);
        for (const key of ["alias", "envdAccessToken", "snapshotId", "endedReason"]) {
          assert.equal(key in (got as object), false, `${key} should be absent`);
        }
        assert.equal(await catalog.getSandbox("sb-unknown"), undefined);
      });

      it("round-trips every optional field and the JSON columns", async (t) => {
        const { catalog } = await use(t);
        const row = sandboxRow({
          id: "sb-full",
          alias: "base",
          envdAccessToken: "envd-token",
          trafficAccessToken: "traffic-token",
          metadata: { owner: "ada", "emoji ✓": '"quoted"\n' },
          envVars: { PATH: "/usr/bin", EMPTY: "" },
          config: { network: { allowOut: ["10.0.0.0/8"] }, secure: true, ports: [49983], n: null },
          snapshotId: "snap-9",
          endedReason: "failed: disk full",
          state: "killed",
        });
        await catalog.insertSandbox(row);
        assert.deepEqual(await catalog.getSandbox("sb-full"), row);
        assert.deepEqual(await catalog.findSandbox("sb-full"), row);
        assert.equal(await catalog.findSandbox("sb-ghost"), undefined);
      });

      it("refuses a second insert with the same id as already_exists", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
        await assert.rejects(catalog.insertSandbox(sandboxRow({ id: "sb-1" })), {
          name: "WarrenError",
          kind: "already_exists",
        });
      });

      it("lists by startedAt then id, filtered by state", async (t) => {
        const { catalog } = await use(t);
        const late = "2030-01-02T00:00:00.000Z";
        await catalog.insertSandbox(sandboxRow({ id: "c", startedAt: late, state: "paused" }));
        await catalog.insertSandbox(sandboxRow({ id: "b", startedAt: late }));
        await catalog.insertSandbox(sandboxRow({ id: "z", state: "killed" }));
        await catalog.insertSandbox(sandboxRow({ id: "a", startedAt: late, state: "creating" }));
        assert.deepEqual(ids(await catalog.listSandboxes()), ["z", "a", "b", "c"]);
        assert.deepEqual(ids(await catalog.listSandboxes(["running", "paused"])), ["b", "c"]);
        assert.deepEqual(ids(await catalog.listSandboxes(["killed"])), ["z"]);
        assert.deepEqual(await catalog.listSandboxes([]), []);
      });

      it("updates only the given keys and stamps updatedAt", async (t) => {
        const { catalog } = await use(t);
        const row = sandboxRow({ id: "sb-1", alias: "base", metadata: { a: "1" } });
        await catalog.insertSandbox(row);
        const before = new Date().toISOString();
        const updated = await catalog.updateSandbox("sb-1", {
          state: "paused",
          snapshotId: "snap-1",
          config: { resumed: 0 },
        });
        const after = new Date().toISOString();
        assert.ok(updated);
        assert.ok(updated.updatedAt >= before && updated.updatedAt <= after, updated.updatedAt);
        assert.deepEqual(updated, {
          ...row,
          state: "paused",
          snapshotId: "snap-1",
          config: { resumed: 0 },
          updatedAt: updated.updatedAt,
        });
        assert.deepEqual(await catalog.getSandbox("sb-1"), updated);
      });

      it("clears an optional field given as undefined", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1", snapshotId: "snap-1", alias: "x" }));
        const updated = await catalog.updateSandbox("sb-1", {
          state: "running",
          snapshotId: undefined,
        });
        assert.equal(updated?.state, "running");
        assert.equal("snapshotId" in (updated as object), false);
        assert.equal(updated?.alias, "x");
        const got = await catalog.getSandbox("sb-1");
        assert.equal(got !== undefined && "snapshotId" in got, false);
      });

      it("returns undefined when updating an unknown id, creating nothing", async (t) => {
        const { catalog } = await use(t);
        assert.equal(await catalog.updateSandbox("sb-ghost", { state: "killed" }), undefined);
        assert.deepEqual(await catalog.listSandboxes(), []);
      });

      it("deletes a row; deleting an unknown id is a no-op", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
        await catalog.insertSandbox(sandboxRow({ id: "sb-2" }));
        await catalog.deleteSandbox("sb-1");
        await catalog.deleteSandbox("sb-unknown");
        assert.equal(await catalog.getSandbox("sb-1"), undefined);
        assert.deepEqual(ids(await catalog.listSandboxes()), ["sb-2"]);
      });

      it("hands out fresh objects each call", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1", metadata: { a: "1" } }));
        const first = await catalog.getSandbox("sb-1");
        (first?.metadata as Record<string, string>).a = "mutated";
        assert.deepEqual((await catalog.getSandbox("sb-1"))?.metadata, { a: "1" });
      });

      it("purges killed sandboxes' secrets past the retention, keeping a snapshotted one's envd token", async (t) => {
        const { catalog } = await use(t);
        const secrets = {
          envdAccessToken: "envd-secret",
          trafficAccessToken: "traffic-secret",
          envVars: { OPENAI_API_KEY: "sk-secret" },
          metadata: { owner: "ada" },
        };
        const old = "2030-01-01T00:00:00.000Z";
        const recent = "2030-01-03T00:00:00.000Z";
        await catalog.insertSandbox(
          sandboxRow({
            id: "old",
            state: "killed",
            endedReason: "killed",
            updatedAt: old,
            ...secrets,
          }),
        );
        await catalog.insertSandbox(
          sandboxRow({ id: "snapped", state: "killed", updatedAt: old, ...secrets }),
        );
        await catalog.insertSandbox(
          sandboxRow({ id: "recent", state: "killed", updatedAt: recent, ...secrets }),
        );
        await catalog.insertSandbox(sandboxRow({ id: "alive", updatedAt: old, ...secrets }));
        await catalog.insertSandbox(
          sandboxRow({ id: "paused", state: "paused", updatedAt: old, ...secrets }),
        );
        await catalog.putSnapshot(snapshotRow({ id: "snap-1", sandboxId: "snapped" }));

        assert.equal(await catalog.purgeKilledSecrets("2030-01-02T00:00:00.000Z"), 2);
        const purged = await catalog.getSandbox("old");
        assert.deepEqual(purged, {
          ...sandboxRow({ id: "old", state: "killed", endedReason: "killed", updatedAt: old }),
          metadata: { owner: "ada" },
        });
        assert.deepEqual(await catalog.getSandbox("snapped"), {
          ...sandboxRow({ id: "snapped", state: "killed", updatedAt: old }),
          envdAccessToken: "envd-secret",
          metadata: { owner: "ada" },
        });
        for (const id of ["recent", "alive", "paused"]) {
          const row = await catalog.getSandbox(id);
          assert.equal(row?.envdAccessToken, "envd-secret", id);
          assert.equal(row?.trafficAccessToken, "traffic-secret", id);
          assert.deepEqual(row?.envVars, secrets.envVars, id);
        }
        assert.equal(await catalog.purgeKilledSecrets("2030-01-02T00:00:00.000Z"), 0, "idempotent");

        // The snapshot goes: its source's token is no longer needed.
        await catalog.deleteSnapshot("snap-1");
        assert.equal(await catalog.purgeKilledSecrets("2030-01-02T00:00:00.000Z"), 1);
        assert.equal((await catalog.getSandbox("snapped"))?.envdAccessToken, undefined);
      });
    });

    describe("team admission", () => {
      /** Admits a row of `vcpus` while the team's vCPUs stay within `limit` (as TeamQuotas does). */
      const withinVcpus =
        (limit: number, vcpus: number): TeamAdmit =>
        (usage) => {
          if (usage.vcpus + vcpus > limit) {
            throw new WarrenError("quota_exceeded", `team at ${usage.vcpus} of ${limit} vCPUs`);
          }
        };

      it("admits concurrent inserts of one team one at a time, on every node: room for one, one row", async (t) => {
        const h = await use(t);
        const nodes = [h.catalog, ...(h.peer ? [await h.peer(), await h.peer()] : [])];
        const settled = await Promise.allSettled(
          Array.from({ length: 8 }, (_, i) =>
            (nodes[i % nodes.length] as Catalog).insertSandbox(
              sandboxRow({ id: `sb-${i}`, vcpus: 8 }),
              withinVcpus(8, 8),
            ),
          ),
        );
        const refused = settled.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
        assert.equal(settled.length - refused.length, 1, "exactly one insert admitted");
        for (const reason of refused) {
          assert.equal((reason as WarrenError).reason, "quota_exceeded");
          assert.equal((reason as WarrenError).message, "team at 8 of 8 vCPUs", "its own words");
        }
        const rows = await Promise.all(
          Array.from({ length: 8 }, (_, i) => h.catalog.findSandbox(`sb-${i}`)),
        );
        assert.equal(rows.filter((row) => row !== undefined).length, 1, "one row written");
      });

      it("counts CPU and memory of what holds them, disk of all but killed, never Warren's own or another team's", async (t) => {
        const h = await use(t);
        const other = h.peer ? await h.peer() : h.catalog;
        await h.catalog.insertSandbox(sandboxRow({ id: "run", vcpus: 2, memoryMiB: 512 }));
        await other.insertSandbox(sandboxRow({ id: "res", state: "resuming", vcpus: 1 }));
        await other.insertSandbox(sandboxRow({ id: "paused", state: "paused", vcpus: 4 }));
        await h.catalog.insertSandbox(sandboxRow({ id: "gone", state: "killed", vcpus: 4 }));
        await h.catalog.insertSandbox(
          sandboxRow({ id: "build-vm", vcpus: 4, config: { internal: true } }),
        );
        await h.catalog.insertSandbox(sandboxRow({ id: "b-1", teamId: "team-b", vcpus: 4 }));
        let seen: TeamUsage | undefined;
        await h.catalog.insertSandbox(sandboxRow({ id: "new" }), (usage) => {
          seen = usage;
        });
        assert.deepEqual(seen, { sandboxes: 2, vcpus: 3, memoryMiB: 1024, diskMiB: 3 * 2048 });
      });

      it("admits a resume against the team's other sandboxes; a refused one leaves the row as it was", async (t) => {
        const h = await use(t);
        const other = h.peer ? await h.peer() : h.catalog;
        await other.insertSandbox(sandboxRow({ id: "running", vcpus: 8 }));
        await h.catalog.insertSandbox(sandboxRow({ id: "paused", state: "paused", vcpus: 8 }));
        await assert.rejects(
          h.catalog.updateSandbox("paused", { state: "resuming" }, withinVcpus(8, 8)),
          { reason: "quota_exceeded" },
        );
        assert.equal((await h.catalog.getSandbox("paused"))?.state, "paused");
        await other.updateSandbox("running", { state: "killed" });
        const resumed = await h.catalog.updateSandbox(
          "paused",
          { state: "resuming" },
          withinVcpus(8, 8),
        );
        assert.equal(resumed?.state, "resuming");
      });
    });

    describe("templates", () => {
      it("finds a template by id or by any alias, aliases in order", async (t) => {
        const { catalog } = await use(t);
        const base = templateRow({ id: "tpl-1", kind: "base", aliases: ["base", "default"] });
        await catalog.putTemplate(base);
        assert.deepEqual(await catalog.getTemplate("tpl-1"), base);
        assert.deepEqual(await catalog.getTemplate("base"), base);
        assert.deepEqual(await catalog.getTemplate("default"), base);
        assert.equal(await catalog.getTemplate("nope"), undefined);
      });

      it("keeps a template's team, and none for a template every team may use", async (t) => {
        const { catalog } = await use(t);
        const owned = templateRow({ id: "tpl-1", teamId: "team-b", aliases: ["mine"] });
        const shared = templateRow({ id: "tpl-2", kind: "base", aliases: ["base"] });
        await catalog.putTemplate(owned);
        await catalog.putTemplate(shared);
        assert.equal((await catalog.getTemplate("mine", "team-b"))?.teamId, "team-b");
        assert.equal("teamId" in ((await catalog.getTemplate("base")) ?? {}), false);
        await catalog.putTemplate({ ...owned, teamId: "team-c" });
        assert.equal((await catalog.getTemplate("tpl-1"))?.teamId, "team-c");
        // Its names went with it to its new team.
        assert.equal((await catalog.getTemplate("mine", "team-c"))?.id, "tpl-1");
        assert.equal(await catalog.getTemplate("mine", "team-b"), undefined);
      });

      it("replaces a template put again with the same id", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTemplate(templateRow({ id: "tpl-1", aliases: ["old"], vcpus: 1 }));
        const next = templateRow({ id: "tpl-1", aliases: ["new"], vcpus: 4, snapshotId: "s2" });
        await catalog.putTemplate(next);
        assert.deepEqual(await catalog.listTemplates(), [next]);
        assert.equal(await catalog.getTemplate("old"), undefined);
      });

      it("moves an alias to the template put last", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTemplate(templateRow({ id: "tpl-1", aliases: ["base", "v1"] }));
        await catalog.putTemplate(
          templateRow({ id: "tpl-2", aliases: ["base"], createdAt: "2030-02-01T00:00:00.000Z" }),
        );
        assert.equal((await catalog.getTemplate("base"))?.id, "tpl-2");
        assert.deepEqual((await catalog.getTemplate("tpl-1"))?.aliases, ["v1"]);
        const listed = await catalog.listTemplates();
        assert.deepEqual(
          listed.map((r) => [r.id, r.aliases]),
          [
            ["tpl-1", ["v1"]],
            ["tpl-2", ["base"]],
          ],
        );
      });

      it("deletes a template with its aliases, freeing them", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTemplate(templateRow({ id: "tpl-1", aliases: ["base"] }));
        await catalog.deleteTemplate("tpl-1");
        assert.equal(await catalog.getTemplate("base"), undefined);
        assert.deepEqual(await catalog.listTemplates(), []);
        await catalog.putTemplate(templateRow({ id: "tpl-2", aliases: ["base"] }));
        assert.equal((await catalog.getTemplate("base"))?.id, "tpl-2");
      });

      it("keeps a template's config", async (t) => {
        const { catalog } = await use(t);
        const built = templateRow({
          id: "tpl-1",
          kind: "build",
          config: { envVars: { A: "1" }, user: "user", steps: [1, 2] },
        });
        await catalog.putTemplate(built);
        assert.deepEqual(await catalog.getTemplate("tpl-1"), built);
      });
    });

    describe("names per team", () => {
      const teamTemplate = (id: string, teamId: string, aliases: string[], createdAt = T0) =>
        templateRow({ id, teamId, aliases, createdAt });

      it("two teams' templates may share a name: each team finds its own, never the other's", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTemplate(teamTemplate("tpl-a", "team-a", ["foo", "v1"]));
        await catalog.putTemplate(teamTemplate("tpl-b", "team-b", ["foo"]));
        assert.equal((await catalog.getTemplate("foo", "team-a"))?.id, "tpl-a");
        assert.equal((await catalog.getTemplate("foo", "team-b"))?.id, "tpl-b");
        assert.equal(await catalog.getTemplate("foo", "team-c"), undefined);
        assert.equal(await catalog.getTemplate("v1", "team-b"), undefined);
        // Without a team (Warren's own lookups): ids of any team, the global names alone.
        assert.equal(await catalog.getTemplate("foo"), undefined);
        assert.equal((await catalog.getTemplate("tpl-b"))?.id, "tpl-b");
        // Another team's id is as unknown to a team as its names are.
        assert.equal(await catalog.getTemplate("tpl-a", "team-b"), undefined);
        assert.equal((await catalog.getTemplate("tpl-a", "team-a"))?.id, "tpl-a");
        assert.deepEqual(
          (await catalog.listTemplates()).map((r) => [r.id, r.aliases]),
          [
            ["tpl-a", ["foo", "v1"]],
            ["tpl-b", ["foo"]],
          ],
        );
      });

      it("a team's put never takes or moves another team's name; within a team the last put's wins", async (t) => {
        const { catalog } = await use(t);
        const later = "2030-02-01T00:00:00.000Z";
        await catalog.putTemplate(teamTemplate("tpl-a", "team-a", ["foo", "v1"]));
        await catalog.putTemplate(teamTemplate("tpl-b", "team-b", ["foo", "v1"], later));
        assert.deepEqual((await catalog.getTemplate("tpl-a"))?.aliases, ["foo", "v1"]);
        assert.equal((await catalog.getTemplate("foo", "team-a"))?.id, "tpl-a");
        await catalog.putTemplate(teamTemplate("tpl-a2", "team-a", ["foo"], later));
        assert.equal((await catalog.getTemplate("foo", "team-a"))?.id, "tpl-a2");
        assert.deepEqual((await catalog.getTemplate("tpl-a"))?.aliases, ["v1"]);
        assert.deepEqual((await catalog.getTemplate("tpl-b"))?.aliases, ["foo", "v1"]);
        // Deleting one team's template frees its names in that team alone.
        await catalog.deleteTemplate("tpl-a2");
        assert.equal(await catalog.getTemplate("foo", "team-a"), undefined);
        assert.equal((await catalog.getTemplate("foo", "team-b"))?.id, "tpl-b");
      });

      it("a global template's names are every team's and beat a team's own; a team's put leaves them", async (t) => {
        const { catalog } = await use(t);
        const global = templateRow({ id: "tpl-g", kind: "base", aliases: ["base"] });
        await catalog.putTemplate(global);
        await catalog.putTemplate(teamTemplate("tpl-a", "team-a", ["base"]));
        assert.deepEqual(await catalog.getTemplate("base", "team-a"), global);
        assert.deepEqual(await catalog.getTemplate("base", "team-b"), global);
        assert.deepEqual(await catalog.getTemplate("base"), global);
        assert.deepEqual(await catalog.getTemplate("tpl-g", "team-b"), global);
        assert.deepEqual((await catalog.getTemplate("tpl-a"))?.aliases, ["base"]);
        // And a global put leaves a team's names alone.
        await catalog.putTemplate(teamTemplate("tpl-b", "team-b", ["code"]));
        await catalog.putTemplate(templateRow({ id: "tpl-h", kind: "base", aliases: ["code"] }));
        assert.deepEqual((await catalog.getTemplate("tpl-b"))?.aliases, ["code"]);
      });

      it("an id is found before a name, among the team's own and the global templates only", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTemplate(teamTemplate("tpl-a", "team-a", []));
        // Team B names a template with team A's id: A's id is nothing to B.
        await catalog.putTemplate(teamTemplate("tpl-b", "team-b", ["tpl-a"]));
        assert.equal((await catalog.getTemplate("tpl-a", "team-b"))?.id, "tpl-b");
        assert.equal((await catalog.getTemplate("tpl-a", "team-a"))?.id, "tpl-a");
        assert.equal((await catalog.getTemplate("tpl-a"))?.id, "tpl-a");
      });

      it("keeps each team's names across close and reopen", async (t) => {
        const harness = await use(t);
        if (!harness.reopen) {
          t.skip(`${name} does not persist (no reopen)`);
          return;
        }
        await harness.catalog.putTemplate(teamTemplate("tpl-a", "team-a", ["foo"]));
        await harness.catalog.putTemplate(teamTemplate("tpl-b", "team-b", ["foo"]));
        const reopened = await harness.reopen();
        assert.equal((await reopened.getTemplate("foo", "team-a"))?.id, "tpl-a");
        assert.equal((await reopened.getTemplate("foo", "team-b"))?.id, "tpl-b");
      });
    });

    describe("builds and tags", () => {
      it("round-trips builds, lists them by template, oldest first", async (t) => {
        const { catalog } = await use(t);
        const first = buildRow({ id: "b-1" });
        const done = buildRow({
          id: "b-2",
          createdAt: "2030-01-02T00:00:00.000Z",
          status: "error",
          layers: ["l-1"],
          reason: { message: "exit code 1", step: "2" },
          finishedAt: "2030-01-02T00:01:00.000Z",
        });
        const other = buildRow({
          id: "b-3",
          teamId: "team-b",
          templateId: "tpl-2",
          snapshotId: "snap-1",
        });
        for (const row of [done, first, other]) await catalog.putBuild(row);
        assert.deepEqual(await catalog.getBuild("b-2"), done);
        assert.deepEqual(await catalog.getBuild("b-3"), other);
        assert.deepEqual(ids(await catalog.listBuilds("tpl-1")), ["b-1", "b-2"]);
        assert.deepEqual(ids(await catalog.listBuilds()), ["b-1", "b-3", "b-2"]);
        await catalog.putBuild({ ...first, status: "ready", snapshotId: "snap-2" });
        assert.equal((await catalog.getBuild("b-1"))?.snapshotId, "snap-2");
        await catalog.deleteBuild("b-1");
        assert.equal(await catalog.getBuild("b-1"), undefined);
      });

      it("points a tag at one build, moves it, lists and deletes tags", async (t) => {
        const { catalog } = await use(t);
        await catalog.putTag({ templateId: "tpl-1", tag: "v1", buildId: "b-1", createdAt: T0 });
        await catalog.putTag({
          templateId: "tpl-1",
          tag: "default",
          buildId: "b-1",
          createdAt: T0,
        });
        await catalog.putTag({ templateId: "tpl-2", tag: "v1", buildId: "b-9", createdAt: T0 });
        await catalog.putTag({ templateId: "tpl-1", tag: "v1", buildId: "b-2", createdAt: T0 });
        assert.equal((await catalog.getTag("tpl-1", "v1"))?.buildId, "b-2");
        assert.deepEqual(
          (await catalog.listTags("tpl-1")).map((r) => [r.tag, r.buildId]),
          [
            ["default", "b-1"],
            ["v1", "b-2"],
          ],
        );
        await catalog.deleteTag("tpl-1", "v1");
        assert.equal(await catalog.getTag("tpl-1", "v1"), undefined);
        assert.equal((await catalog.getTag("tpl-2", "v1"))?.buildId, "b-9");
      });
    });

    describe("snapshots", () => {
      it("round-trips a snapshot, leaving unset optional fields absent", async (t) => {
        const { catalog } = await use(t);
        const bare = snapshotRow({ id: "snap-1", kind: "template" });
        const full = snapshotRow({
          id: "snap-2",
          sandboxId: "sb-1",
          parentId: "snap-1",
          names: ["nightly", "v2"],
          files: [{ name: "disk.qcow2", bytes: 196_608, sha256: "ab".repeat(32) }],
        });
        await catalog.putSnapshot(bare);
        await catalog.putSnapshot(full);
        const got = await catalog.getSnapshot("snap-1");
        assert.deepEqual(got, bare);
        assert.equal("sandboxId" in (got as object) || "parentId" in (got as object), false);
        assert.deepEqual(await catalog.getSnapshot("snap-2"), full);
        assert.equal(await catalog.getSnapshot("snap-3"), undefined);
      });

      it("replaces a snapshot put again and deletes it", async (t) => {
        const { catalog } = await use(t);
        await catalog.putSnapshot(snapshotRow({ id: "snap-1", names: ["a"] }));
        const next = snapshotRow({ id: "snap-1", names: ["b"], kind: "named" });
        await catalog.putSnapshot(next);
        assert.deepEqual(await catalog.listSnapshots(), [next]);
        await catalog.deleteSnapshot("snap-1");
        assert.equal(await catalog.getSnapshot("snap-1"), undefined);
      });

      it("lists by createdAt then id, filtered by sandbox and by contained name", async (t) => {
        const { catalog } = await use(t);
        const late = "2030-03-01T00:00:00.000Z";
        await catalog.putSnapshot(snapshotRow({ id: "s-c", sandboxId: "sb-1", names: ["ab"] }));
        await catalog.putSnapshot(
          snapshotRow({ id: "s-b", sandboxId: "sb-1", names: ["x", "a"], createdAt: late }),
        );
        await catalog.putSnapshot(
          snapshotRow({ id: "s-a", sandboxId: "sb-2", names: ["a"], createdAt: late }),
        );
        await catalog.putSnapshot(snapshotRow({ id: "s-d" }));
        assert.deepEqual(ids(await catalog.listSnapshots()), ["s-c", "s-d", "s-a", "s-b"]);
        assert.deepEqual(ids(await catalog.listSnapshots({ sandboxId: "sb-1" })), ["s-c", "s-b"]);
        assert.deepEqual(ids(await catalog.listSnapshots({ name: "a" })), ["s-a", "s-b"]);
        assert.deepEqual(ids(await catalog.listSnapshots({ sandboxId: "sb-1", name: "a" })), [
          "s-b",
        ]);
        assert.deepEqual(await catalog.listSnapshots({ name: "zzz" }), []);
      });

      it("reports the snapshots, templates and live sandboxes that use a snapshot", async (t) => {
        const { catalog } = await use(t);
        await catalog.putSnapshot(snapshotRow({ id: "root" }));
        await catalog.putSnapshot(snapshotRow({ id: "child-2", parentId: "root" }));
        await catalog.putSnapshot(snapshotRow({ id: "child-1", parentId: "root" }));
        await catalog.putSnapshot(snapshotRow({ id: "grandchild", parentId: "child-1" }));
        await catalog.putTemplate(templateRow({ id: "tpl-1", snapshotId: "root" }));
        await catalog.putTemplate(templateRow({ id: "tpl-2", snapshotId: "child-1" }));
        await catalog.insertSandbox(sandboxRow({ id: "sb-paused", snapshotId: "root" }));
        await catalog.insertSandbox(
          sandboxRow({ id: "sb-killed", snapshotId: "root", state: "killed" }),
        );
        await catalog.insertSandbox(sandboxRow({ id: "sb-other", snapshotId: "child-1" }));
        assert.deepEqual(await catalog.snapshotUsers("root"), {
          snapshots: ["child-1", "child-2"],
          templates: ["tpl-1"],
          sandboxes: ["sb-paused"],
        });
        assert.deepEqual(await catalog.snapshotUsers("grandchild"), {
          snapshots: [],
          templates: [],
          sandboxes: [],
        });
      });
    });

    describe("events", () => {
      const at = (second: number) => `2030-01-01T00:00:${String(second).padStart(2, "0")}.000Z`;
      async function record(catalog: Catalog, events: EventRow[]): Promise<void> {
        for (const event of events) await catalog.recordEvent(event);
      }

      it("lists a sandbox's events oldest first, ties in recording order", async (t) => {
        const { catalog } = await use(t);
        await record(catalog, [
          { at: at(3), sandboxId: "sb-1", kind: "sandbox.paused", detail: { by: "ttl", n: 1 } },
          { at: at(1), sandboxId: "sb-1", kind: "sandbox.created" },
          { at: at(2), sandboxId: "sb-2", kind: "sandbox.created" },
          { at: at(3), sandboxId: "sb-1", kind: "sandbox.resumed" },
        ]);
        assert.deepEqual(await catalog.listEvents("sb-1"), [
          { at: at(1), sandboxId: "sb-1", kind: "sandbox.created" },
          { at: at(3), sandboxId: "sb-1", kind: "sandbox.paused", detail: { by: "ttl", n: 1 } },
          { at: at(3), sandboxId: "sb-1", kind: "sandbox.resumed" },
        ]);
        assert.deepEqual(await catalog.listEvents("sb-none"), []);
      });

      it("takes since inclusively and keeps the newest `limit`, still oldest first", async (t) => {
        const { catalog } = await use(t);
        await record(
          catalog,
          [1, 2, 3, 4, 5].map((s) => ({ at: at(s), sandboxId: "sb-1", kind: `k${s}` })),
        );
        const kinds = (events: EventRow[]) => events.map((e) => e.kind);
        assert.deepEqual(kinds(await catalog.listEvents("sb-1", { since: at(3) })), [
          "k3",
          "k4",
          "k5",
        ]);
        assert.deepEqual(kinds(await catalog.listEvents("sb-1", { limit: 2 })), ["k4", "k5"]);
        assert.deepEqual(kinds(await catalog.listEvents("sb-1", { since: at(4), limit: 5 })), [
          "k4",
          "k5",
        ]);
        assert.deepEqual(await catalog.listEvents("sb-1", { limit: 0 }), []);
      });

      it("lists a team's lifecycle events by time, paged and filtered, with their sandbox", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1", metadata: { run: "r1" } }));
        await catalog.insertSandbox(sandboxRow({ id: "sb-2", snapshotId: "snap-2" }));
        await catalog.insertSandbox(sandboxRow({ id: "sb-b", teamId: "team-b" }));
        await catalog.insertSandbox(sandboxRow({ id: "sb-int", config: { internal: true } }));
        const created = "sandbox.lifecycle.created";
        const paused = "sandbox.lifecycle.paused";
        await record(catalog, [
          { at: at(1), sandboxId: "sb-1", kind: "sandbox.created", lifecycle: created },
          { at: at(2), sandboxId: "sb-2", kind: "sandbox.created", lifecycle: created },
          { at: at(2), sandboxId: "sb-1", kind: "sandbox.paused", lifecycle: paused, detail: {} },
          { at: at(3), sandboxId: "sb-1", kind: "sandbox.note" },
          { at: at(3), sandboxId: "sb-b", kind: "sandbox.created", lifecycle: created },
          { at: at(3), sandboxId: "sb-int", kind: "sandbox.created", lifecycle: created },
        ]);
        const page = { teamId: "team-a", offset: 0, limit: 10, ascending: false };
        const listed = await catalog.listLifecycleEvents(page);
        assert.deepEqual(
          listed.map((e) => [e.at, e.sandbox.id, e.lifecycle]),
          [
            [at(2), "sb-1", paused],
            [at(2), "sb-2", created],
            [at(1), "sb-1", created],
          ],
          "newest first, a tie newest recorded first; no other team's, internal VM's or plain entry",
        );
        const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
        assert.ok(listed.every((e) => uuid.test(e.id)));
        assert.equal(new Set(listed.map((e) => e.id)).size, 3);
        assert.deepEqual(listed[2], {
          id: listed[2]?.id,
          at: at(1),
          lifecycle: created,
          kind: "sandbox.created",
          sandbox: {
            id: "sb-1",
            teamId: "team-a",
            templateId: "tpl-base",
            metadata: { run: "r1" },
            startedAt: T0,
            vcpus: 2,
            memoryMiB: 512,
          },
        });
        assert.equal(listed[1]?.sandbox.snapshotId, "snap-2");
        const ids = (events: LifecycleEventRow[]) => events.map((e) => e.id);
        const oldest = await catalog.listLifecycleEvents({ ...page, ascending: true });
        assert.deepEqual(ids(oldest), ids(listed).reverse());
        assert.deepEqual(ids(await catalog.listLifecycleEvents({ ...page, offset: 1, limit: 1 })), [
          listed[1]?.id,
        ]);
        const only = { ...page, types: [paused] };
        assert.deepEqual(ids(await catalog.listLifecycleEvents(only)), [listed[0]?.id]);
        const one = { ...page, sandboxId: "sb-2" };
        assert.deepEqual(ids(await catalog.listLifecycleEvents(one)), [listed[1]?.id]);
        assert.deepEqual(await catalog.listLifecycleEvents({ ...page, teamId: "team-c" }), []);
        assert.equal(
          (await catalog.listLifecycleEvents({ ...page, teamId: "team-b" }))[0]?.sandbox.id,
          "sb-b",
        );
        await assert.rejects(catalog.listLifecycleEvents({ ...page, limit: -1 }), {
          reason: "invalid_argument",
        });
        // The history keeps the type too.
        assert.equal((await catalog.listEvents("sb-1"))[1]?.lifecycle, paused);
      });

      it("purges the events recorded before a time, and only those", async (t) => {
        const { catalog } = await use(t);
        await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
        await record(
          catalog,
          [1, 2, 3].map((s) => ({
            at: at(s),
            sandboxId: "sb-1",
            kind: "sandbox.created",
            lifecycle: "sandbox.lifecycle.created",
          })),
        );
        assert.equal(await catalog.purgeEvents(at(3)), 2);
        assert.deepEqual(
          (await catalog.listEvents("sb-1")).map((e) => e.at),
          [at(3)],
        );
        const page = { teamId: "team-a", offset: 0, limit: 10, ascending: true };
        assert.equal((await catalog.listLifecycleEvents(page)).length, 1);
        assert.equal(await catalog.purgeEvents(at(1)), 0);
      });
    });

    it("keeps every row across close and reopen", async (t) => {
      const harness = await use(t);
      if (!harness.reopen) {
        t.skip(`${name} does not persist (no reopen)`);
        return;
      }
      const sandbox = sandboxRow({ id: "sb-1", metadata: { k: "v" }, snapshotId: "snap-1" });
      const template = templateRow({ id: "tpl-1", aliases: ["base"], snapshotId: "snap-1" });
      const snapshot = snapshotRow({ id: "snap-1", names: ["n"] });
      const event: EventRow = { at: T0, sandboxId: "sb-1", kind: "sandbox.created", detail: {} };
      await harness.catalog.insertSandbox(sandbox);
      await harness.catalog.putTemplate(template);
      await harness.catalog.putSnapshot(snapshot);
      await harness.catalog.recordEvent(event);
      const reopened = await harness.reopen();
      assert.deepEqual(await reopened.listSandboxes(), [sandbox]);
      assert.deepEqual(await reopened.getTemplate("base"), template);
      assert.deepEqual(await reopened.listSnapshots({ name: "n" }), [snapshot]);
      assert.deepEqual(await reopened.listEvents("sb-1"), [event]);
    });
  });
}
