// The TeamCatalog contract on SQLite (a file in a temporary directory) and on InMemoryTeams,
// the API and gateway tests' fake. PostgreSQL's run is in test/e2e/catalog.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { teamsContract } from "../../contracts/teams.contract.js";
import { InMemoryTeams } from "../../fakes/in-memory-teams.js";

teamsContract("sqlite", async () => {
  const dir = await mkdtemp(join(tmpdir(), "warren-teams-"));
  const catalog = await SqliteCatalog.open(join(dir, "catalog.db"));
  return {
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

teamsContract("in-memory (test fake)", async () => ({
  teams: new InMemoryTeams(),
  cleanup: async () => {},
}));
