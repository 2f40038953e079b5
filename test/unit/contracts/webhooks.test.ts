// The WebhookCatalog contract on SQLite (a file in a temporary directory). PostgreSQL's run
// is in test/e2e/catalog.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { webhooksContract } from "../../contracts/webhooks.contract.js";

webhooksContract("sqlite", async () => {
  const dir = await mkdtemp(join(tmpdir(), "warren-webhooks-"));
  const catalog = await SqliteCatalog.open(join(dir, "catalog.db"));
  return {
    catalog,
    webhooks: catalog.webhooks,
    teams: catalog.teams,
    cleanup: async () => {
      await catalog.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});
