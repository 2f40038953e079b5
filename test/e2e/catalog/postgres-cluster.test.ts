// PostgresCluster against a real PostgreSQL (test/helpers/postgres.ts, one server for this
// file, a fresh database per test): the ClusterCatalog contract, the nodes' rows written
// through PostgresCatalogs on the same database; and that the database holds no credential
// of the cluster's own.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { type Catalog, PostgresCatalog, PostgresCluster } from "../../../src/catalog/index.js";
import { MIGRATIONS } from "../../../src/catalog/postgres/migrations.js";
import { clusterContract } from "../../contracts/cluster.contract.js";
import { startPostgres, type TestPostgres } from "../../helpers/postgres.js";

let server: TestPostgres;
before(async () => {
  server = await startPostgres();
});
after(() => server?.stop());

let databases = 0;
clusterContract("postgres", async () => {
  const name = `cluster_${++databases}`;
  const connectionString = await server.createDatabase(name);
  const cluster = await PostgresCluster.open({ connectionString });
  const catalogs: Catalog[] = [];
  const others: PostgresCluster[] = [];
  return {
    cluster,
    reopen: async () => {
      const other = await PostgresCluster.open({ connectionString });
      others.push(other);
      return other;
    },
    catalog: async (nodeId) => {
      const catalog = await PostgresCatalog.open({ connectionString, nodeId, maxConnections: 2 });
      catalogs.push(catalog);
      return catalog;
    },
    cleanup: async () => {
      for (const catalog of catalogs) await catalog.close();
      for (const other of others) await other.close();
      await cluster.close();
      await server.dropDatabase(name);
    },
  };
});

describe("PostgresCluster: no credential in the database", () => {
  it("an upgraded cluster's database loses the cluster key it held (cluster_secrets), which any holder of its URL could read", async () => {
    const name = `retired_key_${++databases}`;
    const connectionString = await server.createDatabase(name);
    // The database as the release before left it: every step up to the cluster key's, a key in it.
    const db = new pg.Client({ connectionString });
    await db.connect();
    let cluster: PostgresCluster | undefined;
    try {
      const upToKey = MIGRATIONS.findIndex((step) => step.includes("CREATE TABLE cluster_secrets"));
      assert.ok(upToKey >= 0);
      await db.query(
        "CREATE TABLE warren_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
      );
      for (let v = 0; v <= upToKey; v++) {
        await db.query(MIGRATIONS[v] as string);
        await db.query("INSERT INTO warren_schema (version) VALUES ($1)", [v + 1]);
      }
      await db.query("INSERT INTO cluster_secrets (name, value) VALUES ('cluster_key', 'k')");

      cluster = await PostgresCluster.open({ connectionString });
      const { rows } = await db.query<{ table: string | null }>(
        "SELECT to_regclass('cluster_secrets')::text AS table",
      );
      assert.deepEqual(rows, [{ table: null }], "the table of the cluster key is gone");
    } finally {
      await cluster?.close();
      await db.end();
      await server.dropDatabase(name);
    }
  });
});
