// Volumes.exportFor: what a sandbox's NFS server may export. A sandbox mounts its own team's
// volumes only, whatever its row says (a template's inherited mounts, a row made elsewhere):
// the export is refused before anything serves it.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { SqliteCatalog } from "../catalog/index.js";
import { Volumes } from "./volumes.js";

const dir = mkdtempSync(join(tmpdir(), "warren-volumes-serve-"));
let catalog: SqliteCatalog;
let volumes: Volumes;

before(async () => {
  catalog = await SqliteCatalog.open(join(dir, "catalog.sqlite"));
  for (const id of ["team-a", "team-b"]) {
    await catalog.teams.putTeam({ id, name: id, createdAt: new Date().toISOString(), limits: {} });
  }
  volumes = new Volumes({ catalog: catalog.volumes, dir: join(dir, "volumes") });
});

after(async () => {
  await catalog.close();
  rmSync(dir, { recursive: true, force: true });
});

it("never exports another team's volume to a sandbox, even alone", async () => {
  const theirs = await volumes.create("team-a", "data");
  const own = await volumes.create("team-b", "own");
  for (const ids of [[theirs.id], [theirs.id, own.id]]) {
    await assert.rejects(volumes.exportFor(ids, "team-b"), { reason: "volume_not_found" });
  }
  const spec = await volumes.exportFor([own.id], "team-b");
  assert.deepEqual(
    spec.volumes.map((v) => v.key),
    [own.id],
  );
});
