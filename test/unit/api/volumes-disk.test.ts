// The volume content API on a disk near its reserve (WARREN_DISK_RESERVE_MIB): uploads and new
// directories are refused with 507 disk_pressure in Warren's error JSON, reads and removals go
// on, and writes are taken again once there is room. The disk's free space is simulated (an
// injected reading), the files are real.
import assert from "node:assert/strict";
import { lstatSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { Volumes } from "../../../src/volumes/index.js";
import { testAuth } from "../../helpers/auth.js";
import { API_KEY, errorOf, type Harness, useApi } from "./api-harness.js";

const MiB = 1024 * 1024;

/** Bytes of the files under `path` (what the simulated disk has lost to them). */
function bytesUnder(path: string): number {
  const stats = lstatSync(path, { throwIfNoEntry: false });
  if (!stats?.isDirectory()) return stats?.size ?? 0;
  return readdirSync(path).reduce((sum, name) => sum + bytesUnder(join(path, name)), 0);
}

describe("volume content API below the disk reserve", () => {
  const dir = mkdtempSync(join(tmpdir(), "warren-volumes-disk-"));
  let catalog: SqliteCatalog;
  let api: Harness;
  let volume: { volumeID: string; token: string };
  const volumesDir = join(dir, "volumes");
  /** The simulated disk: its free space falls as the volumes' files grow. */
  let capacity = 8192 * MiB;
  const setFree = (bytes: number) => {
    capacity = bytesUnder(volumesDir) + bytes;
  };

  before(async () => {
    catalog = await SqliteCatalog.open(join(dir, "catalog.sqlite"));
    const volumes = new Volumes({
      catalog: catalog.volumes,
      dir: volumesDir,
      diskReserveMiB: 1024,
      freeBytes: () => capacity - bytesUnder(volumesDir),
    });
    api = useApi({
      authenticate: testAuth(() => new Set([API_KEY]), catalog.teams),
      volumes: () => volumes,
    });
    volume = (await api.call("POST", "/volumes", { body: { name: "full" } })).json() as {
      volumeID: string;
      token: string;
    };
  });

  after(async () => {
    await catalog.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const content = (
    method: "GET" | "POST" | "PUT" | "DELETE",
    what: string,
    path: string,
    body?: string,
  ) =>
    api.app.inject({
      method,
      url: `/volumecontent/${volume.volumeID}/${what}?${new URLSearchParams({ path })}`,
      headers: {
        authorization: `Bearer ${volume.token}`,
        ...(body !== undefined && { "content-type": "application/octet-stream" }),
      },
      ...(body !== undefined && { payload: body }),
    });

  it("PUT /volumecontent/{id}/file below the reserve: 507 disk_pressure, {code, message}", async () => {
    assert.equal((await content("PUT", "file", "/kept", "before")).statusCode, 201);
    setFree(1024 * MiB + 10); // ten bytes above the reserve
    const refused = await content("PUT", "file", "/big", "x".repeat(4096));
    assert.equal(refused.statusCode, 507, refused.body);
    const error = errorOf(refused);
    assert.equal(error.code, 507);
    assert.match(error.message, /reserve \(WARREN_DISK_RESERVE_MIB\)/);
    const dirRefused = await content("POST", "dir", "/d");
    assert.equal(dirRefused.statusCode, 507, "a new directory too");
    // What frees or only reads goes on.
    assert.equal((await content("GET", "file", "/kept")).body, "before");
    assert.equal((await content("DELETE", "path", "/kept")).statusCode, 204);
    setFree(2048 * MiB);
    assert.equal((await content("PUT", "file", "/big", "x".repeat(4096))).statusCode, 201);
  });

  it("refuses an upload larger than the room above the reserve, keeping the reserve", async () => {
    setFree(1024 * MiB + 200 * 1024); // room for 200 KiB above the reserve, not 1 MiB
    const refused = await content("PUT", "file", "/huge", "y".repeat(MiB));
    assert.equal(refused.statusCode, 507, refused.body);
    errorOf(refused);
    assert.ok(bytesUnder(volumesDir) < 300 * 1024, "the disk kept its reserve");
  });
});
