// Volumes mounted in sandboxes through the real e2b SDK (`volumeMounts` at create): two
// sandboxes share one, each sees the other's writes and the content API sees both; it is
// kept through pause/resume (written meanwhile: a snapshot never rolls it back) and a fork ×4
// (children mount the same volume, not a copy); git works in it; a set-uid-root program one
// sandbox's root plants runs as its caller in the other; it outlives its sandboxes, cannot be
// destroyed while mounted, and is destroyed at the end.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Sandbox, Volume } from "e2b";
import { api, useServer } from "../helpers/server.js";

const server = useServer();

/** What a sandbox reads at `path`, waiting out the 1 s its NFS client caches attributes for. */
async function readIn(sandbox: Sandbox, path: string, expected: string): Promise<string> {
  let out = "";
  for (let i = 0; i < 30 && out !== expected; i++) {
    if (i > 0) await new Promise((resolve) => setTimeout(resolve, 200));
    out = (await sandbox.commands.run(`cat ${path} 2>/dev/null || true`)).stdout;
  }
  return out;
}

function children(results: (Sandbox | Error)[]): Sandbox[] {
  for (const result of results) if (result instanceof Error) throw result;
  return results as Sandbox[];
}

describe("volumes mounted in sandboxes (e2b SDK)", () => {
  let volume: Volume;
  const sandboxes: Sandbox[] = [];

  before(async () => {
    process.env.E2B_VOLUME_API_URL = server.url;
    volume = await Volume.create(`shared-${Date.now()}`);
  });

  after(async () => {
    delete process.env.E2B_VOLUME_API_URL;
    await Promise.all(sandboxes.map((s) => s.kill().catch(() => false)));
    if (volume) await Volume.destroy(volume.volumeId).catch(() => false);
  });

  it("is shared by two sandboxes, kept through pause/resume and fork ×4, and outlives them", async () => {
    const a = await Sandbox.create({ volumeMounts: { "/mnt/shared": volume } });
    sandboxes.push(a);
    const b = await Sandbox.create({ volumeMounts: { "/home/user/data": volume.name } });
    sandboxes.push(b);
    assert.deepEqual((await a.getInfo()).volumeMounts, [
      { name: volume.name, path: "/mnt/shared" },
    ]);

    // Both ways between the sandboxes, as their default user, and through the content API.
    await a.commands.run("echo from-a > /mnt/shared/a.txt");
    assert.equal(await readIn(b, "/home/user/data/a.txt", "from-a\n"), "from-a\n");
    await b.commands.run("mkdir -p ~/data/dir && echo from-b > ~/data/dir/b.txt");
    assert.equal(await readIn(a, "/mnt/shared/dir/b.txt", "from-b\n"), "from-b\n");
    assert.equal(await volume.readFile("/dir/b.txt"), "from-b\n");
    await volume.writeFile("/api.txt", "from-api\n");
    assert.equal(await readIn(a, "/mnt/shared/api.txt", "from-api\n"), "from-api\n");

    // Tools agents run: a git repository made in one sandbox, committed to in the other.
    await a.commands.run(
      "cd /mnt/shared && git init -q repo && cd repo && echo 1 > f && git add f && git -c user.email=a@x -c user.name=a commit -qm one",
    );
    const log = await b.commands.run(
      "cd ~/data/repo && echo 2 >> f && git -c user.email=b@x -c user.name=b commit -qam two && git log --format=%s",
    );
    assert.equal(log.stdout, "two\none\n");

    // One sandbox's root plants a set-uid-root program; in the other it runs as its caller:
    // root is squashed (the file is 65534's), the bit is never stored, and mounts are nosuid.
    await a.commands.run(
      "cp /usr/bin/id /mnt/shared/id && chown 0:0 /mnt/shared/id && chmod 4755 /mnt/shared/id",
      { user: "root" },
    );
    assert.equal(
      (await b.commands.run("stat -c '%a %u' ~/data/id")).stdout.trim(),
      "755 65534",
      "no set-uid bit, not root's",
    );
    assert.equal((await b.commands.run("~/data/id -u")).stdout.trim(), "1000");

    // Mounted: not destroyed (409), the SDK says why.
    await assert.rejects(Volume.destroy(volume.volumeId), /mounted by sandbox/);

    // Pause, write meanwhile, resume: the resumed guest sees the write (no rollback).
    await a.pause();
    await b.commands.run("echo while-paused > ~/data/paused.txt");
    const resumed = await Sandbox.connect(a.sandboxId);
    assert.equal(
      await readIn(resumed, "/mnt/shared/paused.txt", "while-paused\n"),
      "while-paused\n",
    );
    await resumed.commands.run("echo after-resume > /mnt/shared/resumed.txt");
    assert.equal(
      await readIn(b, "/home/user/data/resumed.txt", "after-resume\n"),
      "after-resume\n",
    );

    // Fork ×4: every child has the mount, writes land in the one volume.
    const forks = children(await resumed.fork({ count: 4 }));
    sandboxes.push(...forks);
    await Promise.all(
      forks.map(async (child, i) => {
        assert.deepEqual((await child.getInfo()).volumeMounts, [
          { name: volume.name, path: "/mnt/shared" },
        ]);
        assert.equal((await child.commands.run("cat /mnt/shared/a.txt")).stdout, "from-a\n");
        await child.commands.run(`echo child-${i} > /mnt/shared/child-${i}.txt`);
      }),
    );
    for (let i = 0; i < 4; i++) {
      assert.equal(
        await readIn(b, `/home/user/data/child-${i}.txt`, `child-${i}\n`),
        `child-${i}\n`,
      );
    }

    // Killed, all of them: the volume and its files stay.
    await Promise.all(sandboxes.splice(0).map((s) => s.kill()));
    const top = (await volume.list("/")).map((e) => e.name).sort();
    for (const name of [
      "a.txt",
      "api.txt",
      "child-0.txt",
      "child-3.txt",
      "dir",
      "paused.txt",
      "repo",
      "resumed.txt",
    ])
      assert.ok(top.includes(name), `${name} in ${top.join(", ")}`);
    assert.equal(await Volume.destroy(volume.volumeId), true);
    assert.equal(existsSync(join(server.dataDir, "volumes", volume.volumeId)), false);
  });

  it("holds a team to its maxVolumeBytes: the guest gets EDQUOT, the content API 429, until files go", async () => {
    const admin = { "x-admin-token": server.adminToken, "x-api-key": "" };
    const limits = { maxVolumeBytes: 8 * 1024 * 1024 };
    const made = await api(
      server,
      "POST",
      "/admin/teams",
      { name: `quota-${Date.now()}`, limits },
      admin,
    );
    assert.equal(made.status, 201);
    const { apiKey } = made.body as { apiKey: string };
    const small = await Volume.create(`small-${Date.now()}`, { apiKey });
    const sandbox = await Sandbox.create({ apiKey, volumeMounts: { "/mnt/small": small } });
    sandboxes.push(sandbox);
    const filled = await sandbox.commands.run(
      "dd if=/dev/urandom of=/mnt/small/big bs=1M count=20 conv=fsync 2>&1; echo exit=$?",
    );
    assert.match(filled.stdout, /Disk quota exceeded/);
    assert.match(filled.stdout, /exit=1/);
    await assert.rejects(small.writeFile("/more", "x".repeat(2 * 1024 * 1024)), /429|quota/);
    // Removed: room again, once the next measure (at most 5 s later) sees it.
    await sandbox.commands.run("rm /mnt/small/big");
    let wrote = "";
    for (let i = 0; i < 40 && !wrote.includes("exit=0"); i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      wrote = (await sandbox.commands.run("echo ok > /mnt/small/again 2>&1; echo exit=$?")).stdout;
    }
    assert.match(wrote, /exit=0/);
    await sandbox.kill();
    assert.equal(await Volume.destroy(small.volumeId, { apiKey }), true);
  });
});
