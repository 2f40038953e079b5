// Volumes through the real e2b SDK's `Volume` (create, connect, list, getInfo, destroy) and
// its content calls (E2B_VOLUME_API_URL: the server), on the server's own data dir: files
// written, read back in every format, listed, their owner and mode set, removed; another
// team sees nothing of them; destroy leaves nothing behind on disk.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from "e2b";
import { api, useServer } from "../helpers/server.js";

const server = useServer();

describe("volumes (e2b SDK)", () => {
  let volume: Volume;

  before(async () => {
    process.env.E2B_VOLUME_API_URL = server.url;
    volume = await Volume.create(`vol-${Date.now()}`);
  });

  after(async () => {
    delete process.env.E2B_VOLUME_API_URL;
    if (volume) await Volume.destroy(volume.volumeId).catch(() => false);
  });

  it("creates, connects, lists and describes a volume", async () => {
    assert.match(volume.volumeId, /^[0-9a-f-]{36}$/);
    assert.ok(volume.token.length > 0);
    const info = await Volume.getInfo(volume.volumeId);
    assert.deepEqual([info.volumeId, info.name], [volume.volumeId, volume.name]);
    // Each answer hands out a fresh token (its expiry to the second): a working one, not the same.
    assert.match(info.token, /^wvt1\.\d+\./);
    const connected = await Volume.connect(volume.volumeId);
    assert.match(connected.token, /^wvt1\.\d+\./);
    assert.deepEqual(await connected.list("/"), [], "its token opens the volume");
    assert.ok((await Volume.list()).some((v) => v.volumeId === volume.volumeId));
    await assert.rejects(
      Volume.getInfo("00000000-0000-4000-8000-000000000000"),
      VolumeNotFoundError,
    );
    await assert.rejects(Volume.create("bad name"), (err) => {
      assert.ok(err instanceof VolumeError);
      assert.match(err.message, /^400: body\/name must be/);
      return true;
    });
  });

  it("writes, reads, lists, changes and removes files", async () => {
    await volume.makeDir("/nested/deep", { force: true });
    const written = await volume.writeFile("/nested/deep/hello.txt", "Hello, volume!", {
      uid: 1000,
      gid: 1000,
      mode: 0o640,
    });
    assert.deepEqual(
      [written.type, written.size, written.uid, written.gid, written.mode],
      ["file", 14, 1000, 1000, 0o640],
    );
    assert.ok(written.mtime instanceof Date);
    assert.equal(await volume.readFile("/nested/deep/hello.txt"), "Hello, volume!");
    const bytes = await volume.readFile("/nested/deep/hello.txt", { format: "bytes" });
    assert.equal(Buffer.from(bytes).toString(), "Hello, volume!");
    const stream = await volume.readFile("/nested/deep/hello.txt", { format: "stream" });
    assert.equal(await new Response(stream).text(), "Hello, volume!");
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await volume.writeFile("/big.bin", new Blob([big]));
    assert.equal(
      Buffer.compare(Buffer.from(await volume.readFile("/big.bin", { format: "bytes" })), big),
      0,
    );

    const listed = await volume.list("/nested", { depth: 2 });
    assert.deepEqual(
      listed.map((e) => [e.path, e.type]),
      [
        ["/nested/deep", "directory"],
        ["/nested/deep/hello.txt", "file"],
      ],
    );
    const updated = await volume.updateMetadata("/nested/deep/hello.txt", { mode: 0o600, uid: 0 });
    assert.deepEqual([updated.mode, updated.uid, updated.gid], [0o600, 0, 1000]);
    assert.equal(await volume.exists("/nested/deep/hello.txt"), true);
    await volume.remove("/nested");
    assert.equal(await volume.exists("/nested"), false);
    await assert.rejects(volume.readFile("/nested/deep/hello.txt"), VolumePathNotFoundError);
    await assert.rejects(volume.list("/missing"), VolumePathNotFoundError);
  });

  it("is another team's to see only by its token, never by that team's key", async () => {
    const admin = { "x-admin-token": server.adminToken, "x-api-key": "" };
    const made = await api(server, "POST", "/admin/teams", { name: `vols-${Date.now()}` }, admin);
    assert.equal(made.status, 201);
    const { apiKey: keyB } = made.body as { apiKey: string };
    assert.equal(
      (await Volume.list({ apiKey: keyB })).some((v) => v.volumeId === volume.volumeId),
      false,
    );
    await assert.rejects(Volume.getInfo(volume.volumeId, { apiKey: keyB }), VolumeNotFoundError);
    assert.equal(await Volume.destroy(volume.volumeId, { apiKey: keyB }), false);
    const forged = new Volume(volume.volumeId, volume.name, "not-the-token");
    await assert.rejects(forged.list("/"));
  });

  it("destroys a volume with its files", async () => {
    const doomed = await Volume.create(`doomed-${Date.now()}`);
    await doomed.writeFile("/a/b.txt", "x", { force: true });
    const dir = join(server.dataDir, "volumes", doomed.volumeId);
    assert.ok(existsSync(dir));
    assert.equal(await Volume.destroy(doomed.volumeId), true);
    assert.equal(existsSync(dir), false);
    assert.equal(await Volume.destroy(doomed.volumeId), false);
    assert.ok(!(await readdir(join(server.dataDir, "volumes"))).includes(doomed.volumeId));
  });
});
