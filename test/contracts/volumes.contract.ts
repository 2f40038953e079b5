import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type { TeamCatalog, VolumeCatalog, VolumeRow } from "../../src/catalog/index.js";
import { WarrenError } from "../../src/shared/index.js";

/** A fresh, migrated catalog per test: its volumes and the teams they belong to. */
export interface VolumesHarness {
  volumes: VolumeCatalog;
  teams: TeamCatalog;
  cleanup: () => Promise<void>;
}

const T0 = "2030-01-01T00:00:00.000Z";
const T1 = "2030-01-01T00:00:01.000Z";

function volume(over: Partial<VolumeRow> & { id: string }): VolumeRow {
  return { teamId: "default", name: over.id, tokenKey: `key-${over.id}`, createdAt: T0, ...over };
}

/** What every VolumeCatalog (SQLite, PostgreSQL) must do. */
export function volumesContract(name: string, open: () => Promise<VolumesHarness>): void {
  const use = async (t: TestContext) => {
    const harness = await open();
    t.after(() => harness.cleanup());
    await harness.teams.putTeam({ id: "b", name: "b", createdAt: T0, limits: {} });
    return harness;
  };

  describe(`VolumeCatalog contract: ${name}`, () => {
    it("inserts, gets, lists by team (oldest first) and deletes", async (t) => {
      const { volumes } = await use(t);
      const a2 = volume({ id: "a2", createdAt: T1 });
      const a1 = volume({ id: "a1" });
      const b1 = volume({ id: "b1", teamId: "b" });
      for (const row of [a2, a1, b1]) await volumes.insertVolume(row);
      assert.deepEqual(await volumes.getVolume("a1"), a1);
      assert.equal(await volumes.getVolume("nope"), undefined);
      assert.deepEqual(await volumes.listVolumes("default"), [a1, a2]);
      assert.deepEqual(await volumes.listVolumes("b"), [b1]);
      assert.deepEqual(
        (await volumes.listVolumes()).map((v) => v.id),
        ["a1", "b1", "a2"],
      );
      assert.equal(await volumes.deleteVolume("a1"), true);
      assert.equal(await volumes.deleteVolume("a1"), false);
      assert.deepEqual(await volumes.listVolumes("default"), [a2]);
    });

    it("changes a volume's token key, and no other's", async (t) => {
      const { volumes } = await use(t);
      await volumes.insertVolume(volume({ id: "v1" }));
      await volumes.insertVolume(volume({ id: "v2" }));
      assert.equal(await volumes.setVolumeTokenKey("v1", "rotated"), true);
      assert.equal((await volumes.getVolume("v1"))?.tokenKey, "rotated");
      assert.equal((await volumes.getVolume("v2"))?.tokenKey, "key-v2");
      assert.equal(await volumes.setVolumeTokenKey("nope", "x"), false);
    });

    it("keeps names unique within a team, not across teams", async (t) => {
      const { volumes } = await use(t);
      await volumes.insertVolume(volume({ id: "v1", name: "data" }));
      await volumes.insertVolume(volume({ id: "v2", name: "data", teamId: "b" }));
      await assert.rejects(
        volumes.insertVolume(volume({ id: "v3", name: "data" })),
        (err) => err instanceof WarrenError && err.reason === "already_exists",
      );
    });

    it("forgets a deleted team's volumes with it", async (t) => {
      const { volumes, teams } = await use(t);
      await volumes.insertVolume(volume({ id: "v1", teamId: "b" }));
      await teams.deleteTeam("b");
      assert.deepEqual(await volumes.listVolumes(), []);
    });
  });
}
