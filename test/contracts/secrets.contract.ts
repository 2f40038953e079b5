import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type { SecretCatalog, SecretRow, TeamCatalog } from "../../src/catalog/index.js";
import { WarrenError } from "../../src/shared/index.js";

/** A fresh, migrated catalog per test: its secrets and the teams they belong to. */
export interface SecretsHarness {
  secrets: SecretCatalog;
  teams: TeamCatalog;
  cleanup: () => Promise<void>;
}

const T0 = "2030-01-01T00:00:00.000Z";
const T1 = "2030-01-01T00:00:01.000Z";

function secret(over: Partial<SecretRow> & { id: string }): SecretRow {
  return {
    teamId: "default",
    name: over.id,
    version: 1,
    metadata: {},
    sealed: `sealed-${over.id}`,
    createdAt: T0,
    updatedAt: T0,
    ...over,
  };
}

/** What every SecretCatalog (SQLite, PostgreSQL) must do. */
export function secretsContract(name: string, open: () => Promise<SecretsHarness>): void {
  const use = async (t: TestContext) => {
    const harness = await open();
    t.after(() => harness.cleanup());
    await harness.teams.putTeam({ id: "b", name: "b", createdAt: T0, limits: {} });
    return harness;
  };

  describe(`SecretCatalog contract: ${name}`, () => {
    it("inserts, gets, finds by name, lists a team's by name, updates and deletes", async (t) => {
      const { secrets } = await use(t);
      const zeta = secret({ id: "sec_z", name: "zeta", metadata: { owner: "ci" } });
      const alpha = secret({ id: "sec_a", name: "alpha" });
      const other = secret({ id: "sec_b", name: "alpha", teamId: "b" });
      for (const row of [zeta, alpha, other]) await secrets.insertSecret(row);
      assert.deepEqual(await secrets.getSecret("sec_z"), zeta);
      assert.equal(await secrets.getSecret("nope"), undefined);
      assert.deepEqual(await secrets.findSecret("default", "alpha"), alpha);
      assert.deepEqual(await secrets.findSecret("b", "alpha"), other);
      assert.equal(await secrets.findSecret("b", "zeta"), undefined);
      assert.deepEqual(await secrets.listSecrets("default"), [alpha, zeta]);
      const change = { version: 2, metadata: { owner: "me" }, sealed: "sealed-2", updatedAt: T1 };
      assert.equal(await secrets.updateSecret("sec_z", change), true);
      assert.deepEqual(await secrets.getSecret("sec_z"), { ...zeta, ...change });
      assert.equal(await secrets.updateSecret("nope", change), false);
      assert.equal(await secrets.deleteSecret("sec_z"), true);
      assert.equal(await secrets.deleteSecret("sec_z"), false);
      assert.deepEqual(await secrets.listSecrets("default"), [alpha]);
    });

    it("keeps names unique within a team; forgets a deleted team's secrets", async (t) => {
      const { secrets, teams } = await use(t);
      await secrets.insertSecret(secret({ id: "sec_1", name: "key" }));
      await assert.rejects(
        secrets.insertSecret(secret({ id: "sec_2", name: "key" })),
        (err) => err instanceof WarrenError && err.reason === "already_exists",
      );
      await secrets.insertSecret(secret({ id: "sec_3", name: "key", teamId: "b" }));
      await teams.deleteTeam("b");
      assert.equal(await secrets.getSecret("sec_3"), undefined);
    });
  });
}
