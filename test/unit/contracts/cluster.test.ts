// The ClusterCatalog contract on InMemoryCluster, the cluster the gateway's unit tests run on;
// the nodes' rows written through its node-scoped InMemoryCatalogs. PostgresCluster's run:
// test/e2e/catalog/postgres-cluster.test.ts.
import { clusterContract } from "../../contracts/cluster.contract.js";
import { InMemoryCluster } from "../../fakes/in-memory-cluster.js";

clusterContract("InMemoryCluster (test fake)", async () => {
  const cluster = new InMemoryCluster();
  return {
    cluster,
    catalog: async (nodeId) => cluster.catalog(nodeId),
    // One object is the whole store here: another client of it is the same object.
    reopen: async () => cluster,
    cleanup: () => cluster.close(),
  };
});
