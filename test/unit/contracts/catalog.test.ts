// The Catalog contract on the single-node catalogs: SQLite (a file in a temporary directory)
// and InMemoryCatalog, the fake the orchestrator's unit tests run on, which must keep the
// contract of the SQLite catalog it stands in for. PostgreSQL's run is in the e2e tier
// (test/e2e/catalog/postgres-catalog.test.ts).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Catalog, SqliteCatalog } from "../../../src/catalog/index.js";
import { catalogContract } from "../../contracts/catalog.contract.js";
import { InMemoryCatalog } from "../../fakes/in-memory-catalog.js";
import { InMemoryCluster } from "../../fakes/in-memory-cluster.js";

catalogContract("sqlite", async () => {
  const dir = await mkdtemp(join(tmpdir(), "warren-catalog-"));
  const path = join(dir, "catalog.db");
  const opened: Catalog[] = [await SqliteCatalog.open(path)];
  return {
    catalog: opened[0] as Catalog,
    reopen: async () => {
      for (const catalog of opened) await catalog.close();
      opened.push(await SqliteCatalog.open(path));
      return opened.at(-1) as Catalog;
    },
    cleanup: async () => {
      for (const catalog of opened) await catalog.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

catalogContract("in-memory (test fake)", async () => {
  let catalog = new InMemoryCatalog();
  return {
    catalog,
    reopen: async () => {
      catalog = await catalog.reopen();
      return catalog;
    },
    cleanup: () => catalog.close(),
  };
});

// Nodes' catalogs on one cluster store, as the gateway's tests and the cluster fake use them.
catalogContract("in-memory cluster (test fake)", async () => {
  const cluster = new InMemoryCluster();
  let nodes = 0;
  return {
    catalog: cluster.catalog("node-a"),
    peer: async () => cluster.catalog(`peer-${++nodes}`),
    cleanup: async () => {},
  };
});
