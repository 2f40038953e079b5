// Volumes.serve: what a sandbox's NFS server may export. A sandbox mounts its own team's
// volumes only, whatever its row says (a template's inherited mounts, a row made elsewhere):
// the serving is refused before anything listens, and the socket it was given is closed.
import assert from "node:assert/strict";
import { fstatSync, mkdtempSync, openSync, rmSync } from "node:fs";
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

/** A descriptor standing in for the slot's listening socket: serve takes it over. */
const descriptor = () => openSync("/dev/null", "r");
const isClosed = (fd: number) => {
  try {
    fstatSync(fd);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EBADF";
  }
};

it("never serves another team's volume to a sandbox, even alone", async () => {
  const theirs = await volumes.create("team-a", "data");
  for (const ids of [[theirs.id], [theirs.id, (await volumes.create("team-b", "own")).id]]) {
    const fd = descriptor();
    await assert.rejects(volumes.serve(fd, ids, "team-b"), { reason: "volume_not_found" });
    assert.ok(isClosed(fd), "the socket given is closed");
  }
});
