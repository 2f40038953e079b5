// The VolumeCatalog contract on SQLite (a file in a temporary directory). PostgreSQL's run
// is in test/e2e/catalog.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { volumesContract } from "../../contracts/volumes.contract.js";

volumesContract("sqlite", async () => {
  const dir = await mkdtemp(join(tmpdir(), "warren-volumes-"));
  const catalog = await SqliteCatalog.open(join(dir, "catalog.db"));
  return {
    volumes: catalog.volumes,
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});
