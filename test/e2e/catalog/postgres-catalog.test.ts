// PostgresCatalog against a real PostgreSQL (test/helpers/postgres.ts, one server for this
// file, a fresh database per test): the Catalog contract every implementation passes, then
// what is PostgreSQL's own: migrations shared by nodes starting at once, node scoping.
import assert from "node:assert/strict";
import { after, before, describe, it, type TestContext } from "node:test";
import pg from "pg";
import { type Catalog, PostgresCatalog, type TemplateKind } from "../../../src/catalog/index.js";
import { MIGRATIONS, SCHEMA_VERSION } from "../../../src/catalog/postgres/migrations.js";
import { catalogContract, sandboxRow } from "../../contracts/catalog.contract.js";
import { secretsContract } from "../../contracts/secrets.contract.js";
import { teamsContract } from "../../contracts/teams.contract.js";
import { volumesContract } from "../../contracts/volumes.contract.js";
import { webhooksContract } from "../../contracts/webhooks.contract.js";
import { startPostgres, type TestPostgres } from "../../helpers/postgres.js";

let server: TestPostgres;
before(async () => {
  server = await startPostgres();
});
after(() => server?.stop());

let databases = 0;
/** A fresh database, dropped when the test ends. */
async function freshDatabase(t?: TestContext): Promise<string> {
  const name = `catalog_${++databases}`;
  const url = await server.createDatabase(name);
  t?.after(() => server.dropDatabase(name));
  return url;
}

catalogContract("postgres", async () => {
  const name = `contract_${++databases}`;
  const connectionString = await server.createDatabase(name);
  const opened: Catalog[] = [await PostgresCatalog.open({ connectionString, nodeId: "node-a" })];
  let peers = 0;
  return {
    catalog: opened[0] as Catalog,
    reopen: async () => {
      for (const catalog of opened) await catalog.close();
      opened.push(await PostgresCatalog.open({ connectionString, nodeId: "node-a" }));
      return opened.at(-1) as Catalog;
    },
    // Another node on the same database: admissions of a team wait for each other there.
    peer: async () => {
      opened.push(await PostgresCatalog.open({ connectionString, nodeId: `peer-${++peers}` }));
      return opened.at(-1) as Catalog;
    },
    cleanup: async () => {
      for (const catalog of opened) await catalog.close();
      await server.dropDatabase(name);
    },
  };
});

volumesContract("postgres", async () => {
  const name = `volumes_${++databases}`;
  const catalog = await PostgresCatalog.open({
    connectionString: await server.createDatabase(name),
    nodeId: "node-a",
  });
  return {
    volumes: catalog.volumes,
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await server.dropDatabase(name);
    },
  };
});

teamsContract("postgres", async () => {
  const name = `teams_${++databases}`;
  const catalog = await PostgresCatalog.open({
    connectionString: await server.createDatabase(name),
    nodeId: "node-a",
  });
  return {
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await server.dropDatabase(name);
    },
  };
});

/** Runs SQL with a bare connection, as an operator's psql would. */
async function inspect<R extends pg.QueryResultRow>(url: string, sql: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(sql)).rows;
  } finally {
    await client.end();
  }
}

async function openAs(t: TestContext, connectionString: string, nodeId: string) {
  const catalog = await PostgresCatalog.open({ connectionString, nodeId, maxConnections: 2 });
  t.after(() => catalog.close());
  return catalog;
}

const T0 = "2030-01-01T00:00:00.000Z";
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

describe("PostgresCatalog", () => {
  it("records each schema step once when several nodes open a fresh database at once", async (t) => {
    const url = await freshDatabase(t);
    const nodes = ["n1", "n2", "n3", "n4", "n5"];
    await Promise.all(nodes.map((nodeId) => openAs(t, url, nodeId)));
    const versions = await inspect<{ version: number }>(
      url,
      "SELECT version FROM warren_schema ORDER BY version",
    );
    assert.deepEqual(
      versions.map((r) => r.version),
      MIGRATIONS.map((_, i) => i + 1),
    );
    assert.equal(SCHEMA_VERSION, MIGRATIONS.length);
  });

  it("refuses a database written by a newer schema, naming both versions, leaving it alone", async (t) => {
    const url = await freshDatabase(t);
    await inspect(
      url,
      `CREATE TABLE warren_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
       INSERT INTO warren_schema (version) VALUES (${SCHEMA_VERSION + 41})`,
    );
    await assert.rejects(
      PostgresCatalog.open({ connectionString: url, nodeId: "n1" }),
      (err: Error & { kind?: string }) => {
        assert.equal(err.name, "WarrenError");
        assert.equal(err.kind, "internal");
        assert.match(err.message, new RegExp(`schema version ${SCHEMA_VERSION + 41}\\b`));
        assert.match(err.message, new RegExp(`the ${SCHEMA_VERSION} this Warren knows`));
        return true;
      },
    );
    const [tables] = await inspect<{ sandboxes: string | null }>(
      url,
      "SELECT to_regclass('sandboxes')::text AS sandboxes",
    );
    assert.equal(tables?.sandboxes, null, "no step ran");
  });

  it("upgrading to per-team names: each alias keeps its template's team, global ones stay global", async (t) => {
    const url = await freshDatabase(t);
    const previous = 6;
    await inspect(
      url,
      `CREATE TABLE warren_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
       ${MIGRATIONS.slice(0, previous).join(";\n")};
       INSERT INTO warren_schema (version) SELECT generate_series(1, ${previous});
       INSERT INTO templates (scope, id, kind, snapshot_id, vcpus, memory_mib, disk_size_mib,
         created_at, config, team_id)
       VALUES ('node-a', 'base-a', 'base', 's', 1, 256, 1024, '${T0}', '{}', NULL),
         ('', 'tpl-1', 'snapshot', 's', 1, 256, 1024, '${T0}', '{}', 'default');
       INSERT INTO template_aliases (scope, alias, template_id, position)
       VALUES ('node-a', 'base', 'base-a', 1), ('', 'golden', 'tpl-1', 1), ('', 'v1', 'tpl-1', 2);`,
    );
    const catalog = await openAs(t, url, "node-a");
    assert.deepEqual(
      await inspect<{ namespace: string; alias: string }>(
        url,
        "SELECT namespace, alias FROM template_aliases ORDER BY alias",
      ),
      [
        { namespace: "", alias: "base" },
        { namespace: "default", alias: "golden" },
        { namespace: "default", alias: "v1" },
      ],
    );
    assert.deepEqual((await catalog.getTemplate("golden", "default"))?.aliases, ["golden", "v1"]);
    assert.equal(await catalog.getTemplate("golden", "team-b"), undefined);
    assert.equal(await catalog.getTemplate("golden"), undefined, "a team's name is not global");
    assert.equal((await catalog.getTemplate("base", "team-b"))?.id, "base-a");
    await catalog.putTemplate({
      id: "tpl-b",
      teamId: "team-b",
      aliases: ["golden"],
      kind: "snapshot",
      snapshotId: "snap-b",
      vcpus: 1,
      memoryMiB: 256,
      diskSizeMiB: 1024,
      createdAt: T0,
    });
    assert.equal((await catalog.getTemplate("golden", "default"))?.id, "tpl-1");
    assert.equal((await catalog.getTemplate("golden", "team-b"))?.id, "tpl-b");
  });

  it("reports an unreachable database and calls after close as unavailable", async (t) => {
    const url = await freshDatabase(t);
    const nowhere = new URL(url);
    nowhere.port = "1";
    await assert.rejects(
      PostgresCatalog.open({ connectionString: nowhere.href, nodeId: "n1" }),
      (err: Error & { kind?: string }) => {
        assert.equal(err.kind, "unavailable");
        assert.doesNotMatch(err.message, /warren@/, "no credentials in the message");
        return true;
      },
    );
    const catalog = await PostgresCatalog.open({ connectionString: url, nodeId: "n1" });
    await catalog.close();
    await catalog.close();
    await assert.rejects(catalog.getSandbox("sb-1"), { name: "WarrenError", kind: "unavailable" });
  });

  it("survives its connections being terminated by the server", async (t) => {
    const url = await freshDatabase(t);
    const catalog = await openAs(t, url, "n1");
    await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
    await inspect(
      url,
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'warren'",
    );
    // The pool drops the dead connection (or the first call after fails as unavailable).
    const got = await catalog.getSandbox("sb-1").catch((err: { kind?: string }) => err);
    if (!(got && "id" in got)) assert.equal((got as { kind?: string }).kind, "unavailable");
    assert.equal((await catalog.getSandbox("sb-1"))?.id, "sb-1");
  });

  it("refuses to clear a required field, a bad timestamp and a bad event limit", async (t) => {
    const catalog = await openAs(t, await freshDatabase(t), "n1");
    await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
    await assert.rejects(catalog.updateSandbox("sb-1", { state: undefined }), {
      kind: "invalid_argument",
    });
    await assert.rejects(catalog.insertSandbox(sandboxRow({ id: "sb-2", startedAt: "soon" })), {
      kind: "invalid_argument",
    });
    await assert.rejects(catalog.listEvents("sb-1", { limit: -1 }), { kind: "invalid_argument" });
    await assert.rejects(catalog.listEvents("sb-1", { limit: 1.5 }), { kind: "invalid_argument" });
    assert.equal((await catalog.getSandbox("sb-1"))?.state, "running");
  });

  describe("node scoping", () => {
    async function twoNodes(t: TestContext) {
      const url = await freshDatabase(t);
      return { url, a: await openAs(t, url, "node-a"), b: await openAs(t, url, "node-b") };
    }

    it("a node sees, changes and deletes only its own sandboxes; ids are cluster-wide", async (t) => {
      const { a, b } = await twoNodes(t);
      await a.insertSandbox(sandboxRow({ id: "sb-a", state: "paused" }));
      await b.insertSandbox(sandboxRow({ id: "sb-b" }));
      assert.deepEqual(ids(await a.listSandboxes()), ["sb-a"]);
      assert.deepEqual(ids(await b.listSandboxes(["running", "paused"])), ["sb-b"]);
      assert.equal(await a.getSandbox("sb-b"), undefined);
      assert.deepEqual(await a.findSandbox("sb-b"), await b.getSandbox("sb-b"), "on any node");
      assert.equal(await a.updateSandbox("sb-b", { state: "killed" }), undefined);
      await a.deleteSandbox("sb-b");
      assert.equal((await b.getSandbox("sb-b"))?.state, "running");
      await assert.rejects(b.insertSandbox(sandboxRow({ id: "sb-a" })), {
        kind: "already_exists",
      });
      assert.equal(await b.getSandbox("sb-a"), undefined);
    });

    it("a node purges only its own killed sandboxes' secrets", async (t) => {
      const { a, b } = await twoNodes(t);
      const killed = { state: "killed" as const, updatedAt: T0, envVars: { K: "secret" } };
      await a.insertSandbox(sandboxRow({ id: "sb-a", ...killed }));
      await b.insertSandbox(sandboxRow({ id: "sb-b", ...killed }));
      assert.equal(await a.purgeKilledSecrets("2031-01-01T00:00:00.000Z"), 1);
      assert.deepEqual((await a.getSandbox("sb-a"))?.envVars, {});
      assert.deepEqual((await b.getSandbox("sb-b"))?.envVars, { K: "secret" });
    });

    it("snapshots: found by id on any node, listed and deleted by their own node", async (t) => {
      const { a, b } = await twoNodes(t);
      const snap = {
        id: "snap-a",
        dir: "/var/lib/warren/snapshots/snap-a",
        kind: "template",
        names: ["n"],
        imagesFingerprint: "fp",
        createdAt: T0,
      };
      await a.putSnapshot(snap);
      assert.deepEqual(await a.getSnapshot("snap-a"), snap, "its own node's: no nodeId");
      assert.deepEqual(await b.getSnapshot("snap-a"), { ...snap, nodeId: "node-a" });
      assert.deepEqual(await b.listSnapshots(), []);
      assert.deepEqual(await b.listSnapshots({ name: "n" }), []);
      assert.deepEqual(ids(await a.listSnapshots({ name: "n" })), ["snap-a"]);
      await b.deleteSnapshot("snap-a");
      assert.deepEqual(await a.getSnapshot("snap-a"), snap, "another node's delete is a no-op");
      await a.deleteSnapshot("snap-a");
      assert.equal(await b.getSnapshot("snap-a"), undefined);
    });

    it("a snapshot's users on every node count, so none is deleted from under another node", async (t) => {
      const { a, b } = await twoNodes(t);
      const snap = (id: string, parentId?: string) => ({
        id,
        dir: `/d/${id}`,
        kind: "pause",
        names: [],
        imagesFingerprint: "fp",
        createdAt: T0,
        ...(parentId && { parentId }),
      });
      await a.putSnapshot(snap("root"));
      await b.putSnapshot(snap("child", "root"));
      await b.insertSandbox(sandboxRow({ id: "sb-b", state: "paused", snapshotId: "root" }));
      await b.putTemplate({
        id: "tpl-g",
        aliases: [],
        kind: "snapshot",
        snapshotId: "root",
        vcpus: 1,
        memoryMiB: 256,
        diskSizeMiB: 1024,
        createdAt: T0,
      });
      assert.deepEqual(await a.snapshotUsers("root"), {
        snapshots: ["child"],
        templates: ["tpl-g"],
        sandboxes: ["sb-b"],
      });
    });

    it("templates: base and layer per node, snapshot and build templates shared", async (t) => {
      const { a, b } = await twoNodes(t);
      const tpl = (id: string, kind: TemplateKind, aliases: string[], createdAt = T0) => ({
        id,
        aliases,
        kind,
        snapshotId: `snap-${id}`,
        vcpus: 1,
        memoryMiB: 256,
        diskSizeMiB: 1024,
        createdAt,
      });
      await a.putTemplate(tpl("base-a", "base", ["base"]));
      await b.putTemplate(tpl("base-b", "base", ["base"]));
      // Layer ids come from their content: the same on both nodes, one row each.
      await a.putTemplate({ ...tpl("l-1", "layer", []), snapshotId: "snap-la" });
      await b.putTemplate({ ...tpl("l-1", "layer", []), snapshotId: "snap-lb" });
      const late = "2030-02-01T00:00:00.000Z";
      await a.putTemplate(tpl("tpl-g", "snapshot", ["my-env"], late));
      assert.equal((await a.getTemplate("base"))?.id, "base-a");
      assert.equal((await b.getTemplate("base"))?.id, "base-b");
      assert.equal((await a.getTemplate("l-1"))?.snapshotId, "snap-la");
      assert.equal((await b.getTemplate("l-1"))?.snapshotId, "snap-lb");
      assert.equal((await b.getTemplate("my-env"))?.id, "tpl-g");
      assert.deepEqual(ids(await b.listTemplates()), ["base-b", "l-1", "tpl-g"]);
      assert.equal(await b.getTemplate("base-a"), undefined);

      // A global alias is unique across the cluster: put by another node, it moves.
      await b.putTemplate(tpl("tpl-h", "build", ["my-env"], late));
      assert.equal((await a.getTemplate("my-env"))?.id, "tpl-h");
      assert.deepEqual((await a.getTemplate("tpl-g"))?.aliases, []);
      // This node's row wins over a global one of the same name.
      await a.putTemplate(tpl("tpl-base", "snapshot", ["base"], late));
      assert.equal((await a.getTemplate("base"))?.id, "base-a");

      await b.deleteTemplate("base-a");
      assert.equal((await a.getTemplate("base"))?.id, "base-a", "another node's base stays");
      await b.deleteTemplate("tpl-g");
      assert.equal(await a.getTemplate("tpl-g"), undefined);
      await a.deleteTemplate("l-1");
      assert.equal((await b.getTemplate("l-1"))?.snapshotId, "snap-lb");
    });

    it("names are per team on every node; a node's built-in name beats a team's", async (t) => {
      const { a, b } = await twoNodes(t);
      const tpl = (id: string, kind: TemplateKind, aliases: string[], teamId?: string) => ({
        id,
        ...(teamId !== undefined && { teamId }),
        aliases,
        kind,
        snapshotId: `snap-${id}`,
        vcpus: 1,
        memoryMiB: 256,
        diskSizeMiB: 1024,
        createdAt: T0,
      });
      await a.putTemplate(tpl("base-a", "base", ["base"]));
      await a.putTemplate(tpl("tpl-1", "build", ["my-env"], "team-1"));
      await b.putTemplate(tpl("tpl-2", "snapshot", ["my-env"], "team-2"));
      assert.equal((await b.getTemplate("my-env", "team-1"))?.id, "tpl-1");
      assert.equal((await a.getTemplate("my-env", "team-2"))?.id, "tpl-2");
      assert.equal(await a.getTemplate("my-env", "team-3"), undefined);
      assert.equal(await a.getTemplate("my-env"), undefined, "no global name");
      assert.equal(await b.getTemplate("tpl-1", "team-2"), undefined, "nor another team's id");
      assert.deepEqual((await a.getTemplate("tpl-1"))?.aliases, ["my-env"]);
      // A team's template named like a node's base: that node's base wins there.
      await b.putTemplate(tpl("tpl-3", "snapshot", ["base"], "team-1"));
      assert.equal((await a.getTemplate("base", "team-1"))?.id, "base-a");
      assert.equal((await b.getTemplate("base", "team-1"))?.id, "tpl-3");
      assert.deepEqual((await a.getTemplate("base-a"))?.aliases, ["base"]);
    });

    it("builds, tags and events are shared", async (t) => {
      const { a, b } = await twoNodes(t);
      await a.putBuild({
        id: "b-1",
        teamId: "default",
        templateId: "tpl-1",
        name: "env",
        tags: ["default"],
        status: "ready",
        vcpus: 1,
        memoryMiB: 256,
        diskSizeMiB: 1024,
        layers: [],
        createdAt: T0,
        updatedAt: T0,
      });
      await a.putTag({ templateId: "tpl-1", tag: "default", buildId: "b-1", createdAt: T0 });
      await a.recordEvent({ at: T0, sandboxId: "sb-1", kind: "sandbox.created" });
      assert.equal((await b.getBuild("b-1"))?.status, "ready");
      assert.equal((await b.getTag("tpl-1", "default"))?.buildId, "b-1");
      assert.equal((await b.listEvents("sb-1")).length, 1);
    });
  });
});

secretsContract("postgres", async () => {
  const name = `secrets_${++databases}`;
  const catalog = await PostgresCatalog.open({
    connectionString: await server.createDatabase(name),
    nodeId: "node-a",
  });
  return {
    secrets: catalog.secrets,
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await server.dropDatabase(name);
    },
  };
});

webhooksContract("postgres", async () => {
  const name = `webhooks_${++databases}`;
  const catalog = await PostgresCatalog.open({
    connectionString: await server.createDatabase(name),
    nodeId: "node-a",
  });
  return {
    catalog,
    webhooks: catalog.webhooks,
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await server.dropDatabase(name);
    },
  };
});
