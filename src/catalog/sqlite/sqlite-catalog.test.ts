import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import Database from "better-sqlite3";
import { sandboxRow } from "../../../test/contracts/catalog.contract.js";
import { MIGRATIONS, SCHEMA_VERSION } from "./migrations.js";
import { SqliteCatalog } from "./sqlite-catalog.js";

describe("SqliteCatalog", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "warren-catalog-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  /** Reads the file with a bare connection, as an operator's sqlite3 shell would. */
  function inspect<T>(path: string, read: (db: Database.Database) => T): T {
    const db = new Database(path, { readonly: true });
    try {
      return read(db);
    } finally {
      db.close();
    }
  }

  it("creates missing parent directories 0700 and the file 0600", async () => {
    const path = join(dir, "a", "b", "catalog.db");
    const catalog = await SqliteCatalog.open(path);
    await catalog.close();
    assert.equal((await stat(join(dir, "a", "b"))).mode & 0o777, 0o700);
    assert.equal((await stat(join(dir, "a"))).mode & 0o777, 0o700);
    assert.equal((await stat(path)).mode & 0o777, 0o600);
  });

  it("records the schema version and uses WAL", async () => {
    const path = join(dir, "version.db");
    const catalog = await SqliteCatalog.open(path);
    await catalog.close();
    assert.equal(SCHEMA_VERSION, MIGRATIONS.length);
    assert.equal(
      inspect(path, (db) => db.pragma("user_version", { simple: true })),
      SCHEMA_VERSION,
    );
    assert.equal(
      inspect(path, (db) => db.pragma("journal_mode", { simple: true })),
      "wal",
    );
    const tables = inspect(path, (db) =>
      db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .pluck()
        .all(),
    );
    assert.deepEqual([...(tables as string[])].sort(), [
      "api_keys",
      "builds",
      "events",
      "sandboxes",
      "secrets",
      "snapshots",
      "teams",
      "template_aliases",
      "template_tags",
      "templates",
      "volumes",
      "webhook_deliveries",
      "webhooks",
    ]);
  });

  it("reopens a current file without migrating it again", async () => {
    const path = join(dir, "twice.db");
    const first = await SqliteCatalog.open(path);
    await first.insertSandbox(sandboxRow({ id: "sb-1" }));
    await first.close();
    const second = await SqliteCatalog.open(path);
    assert.equal((await second.getSandbox("sb-1"))?.id, "sb-1");
    await second.close();
  });

  it("refuses a file written by a newer schema, naming both versions", async () => {
    const path = join(dir, "newer.db");
    const db = new Database(path);
    db.pragma(`user_version = ${SCHEMA_VERSION + 41}`);
    db.close();
    await assert.rejects(SqliteCatalog.open(path), (err: Error & { kind?: string }) => {
      assert.equal(err.name, "WarrenError");
      assert.equal(err.kind, "internal");
      assert.match(err.message, new RegExp(`schema version ${SCHEMA_VERSION + 41}\\b`));
      assert.match(err.message, new RegExp(`the ${SCHEMA_VERSION} this Warren knows`));
      return true;
    });
    assert.equal(
      inspect(path, (db) => db.pragma("user_version", { simple: true })),
      SCHEMA_VERSION + 41,
    );
    assert.equal(
      inspect(path, (db) => db.pragma("journal_mode", { simple: true })),
      "delete",
    );
  });

  it("purged secrets are gone from the file: from its rows and from its bytes (db and WAL)", async (t) => {
    const path = join(dir, "purge.db");
    const catalog = await SqliteCatalog.open(path);
    t.after(() => catalog.close());
    const secrets = {
      envdAccessToken: "envd-SECRET-4f1c",
      trafficAccessToken: "traffic-SECRET-4f1c",
      envVars: { API_TOKEN: "env-SECRET-4f1c" },
    };
    await catalog.insertSandbox(sandboxRow({ id: "sb-live" }));
    await catalog.insertSandbox(sandboxRow({ id: "sb-dead", ...secrets }));
    // Killed the way the orchestrator kills: an update, which also stamps updatedAt.
    await catalog.updateSandbox("sb-dead", { state: "killed", endedReason: "killed" });
    const raw = () =>
      Buffer.concat(
        [path, `${path}-wal`].filter((file) => existsSync(file)).map((file) => readFileSync(file)),
      ).toString("latin1");
    assert.match(raw(), /SECRET-4f1c/, "the secrets are on disk before the purge");

    assert.equal(await catalog.purgeKilledSecrets(new Date(Date.now() + 1000).toISOString()), 1);
    const row = inspect(path, (db) =>
      db
        .prepare(
          "SELECT envd_access_token, traffic_access_token, env_vars, state FROM sandboxes WHERE id = ?",
        )
        .get("sb-dead"),
    );
    assert.deepEqual(row, {
      envd_access_token: null,
      traffic_access_token: null,
      env_vars: "{}",
      state: "killed",
    });
    assert.doesNotMatch(raw(), /SECRET-4f1c/, "no copy left in free space or the WAL");
  });

  it("upgrading to per-team names: each alias keeps its template's team, global ones stay global", async (t) => {
    const path = join(dir, "names.db");
    const v6 = new Database(path);
    for (const step of MIGRATIONS.slice(0, 6)) v6.exec(step);
    v6.pragma("user_version = 6");
    const template = v6.prepare(
      `INSERT INTO templates (id, team_id, kind, snapshot_id, vcpus, memory_mib, disk_size_mib, created_at)
       VALUES (?, ?, ?, 'snap', 1, 256, 1024, '2030-01-01T00:00:00.000Z')`,
    );
    const alias = v6.prepare(
      "INSERT INTO template_aliases (alias, template_id, position) VALUES (?, ?, ?)",
    );
    template.run("tpl-base", null, "base");
    alias.run("base", "tpl-base", 0);
    template.run("tpl-a", "default", "snapshot");
    alias.run("golden", "tpl-a", 0);
    alias.run("v1", "tpl-a", 1);
    v6.close();

    const catalog = await SqliteCatalog.open(path);
    t.after(() => catalog.close());
    assert.deepEqual((await catalog.getTemplate("golden", "default"))?.aliases, ["golden", "v1"]);
    assert.equal(await catalog.getTemplate("golden", "team-b"), undefined);
    assert.equal(await catalog.getTemplate("golden"), undefined, "a team's name is not global");
    assert.equal((await catalog.getTemplate("base", "team-b"))?.id, "tpl-base");
    assert.equal((await catalog.getTemplate("base"))?.id, "tpl-base");
    // Another team's `golden` now takes nothing from the default team's.
    await catalog.putTemplate({
      id: "tpl-b",
      teamId: "team-b",
      aliases: ["golden"],
      kind: "snapshot",
      snapshotId: "snap-b",
      vcpus: 1,
      memoryMiB: 256,
      diskSizeMiB: 1024,
      createdAt: "2030-01-02T00:00:00.000Z",
    });
    assert.equal((await catalog.getTemplate("golden", "default"))?.id, "tpl-a");
    assert.equal((await catalog.getTemplate("golden", "team-b"))?.id, "tpl-b");
    // Deleting a template still takes its aliases with it (the new table's cascade).
    await catalog.deleteTemplate("tpl-a");
    assert.equal(
      inspect(path, (db) => db.prepare("SELECT count(*) FROM template_aliases").pluck().get()),
      2,
    );
  });

  it("rejects calls after close as unavailable", async () => {
    const catalog = await SqliteCatalog.open(join(dir, "closed.db"));
    await catalog.close();
    await catalog.close();
    await assert.rejects(catalog.getSandbox("sb-1"), { name: "WarrenError", kind: "unavailable" });
  });

  it("refuses to clear a required field", async (t) => {
    const catalog = await SqliteCatalog.open(join(dir, "required.db"));
    t.after(() => catalog.close());
    await catalog.insertSandbox(sandboxRow({ id: "sb-1" }));
    await assert.rejects(catalog.updateSandbox("sb-1", { state: undefined }), {
      kind: "invalid_argument",
    });
    assert.equal((await catalog.getSandbox("sb-1"))?.state, "running");
  });

  it("rejects a negative or fractional event limit", async (t) => {
    const catalog = await SqliteCatalog.open(join(dir, "limit.db"));
    t.after(() => catalog.close());
    await assert.rejects(catalog.listEvents("sb-1", { limit: -1 }), { kind: "invalid_argument" });
    await assert.rejects(catalog.listEvents("sb-1", { limit: 1.5 }), { kind: "invalid_argument" });
  });
});
