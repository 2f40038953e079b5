// The orchestrator's unit tests run on InMemoryCatalog: it must keep the same contract as
// the SQLite catalog it stands in for.
import { catalogContract } from "../../../src/catalog/catalog.contract.js";
import { InMemoryCatalog } from "../../fakes/in-memory-catalog.js";

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
