// PostgresCluster against a real PostgreSQL (test/helpers/postgres.ts, one server for this
// file, a fresh database per test): the ClusterCatalog contract, the nodes' rows written
// through PostgresCatalogs on the same database.
import { after, before } from "node:test";
import { type Catalog, PostgresCatalog, PostgresCluster } from "../../../src/catalog/index.js";
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
