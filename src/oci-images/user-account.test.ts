import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { ensureGuestUser } from "./user-account.js";

const roots: string[] = [];
after(async () => {
  for (const root of roots) await rm(root, { recursive: true, force: true });
});

async function imageRoot(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "warren-user-"));
  roots.push(root);
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(root, path, ".."), { recursive: true });
    await writeFile(join(root, path), text);
  }
  return root;
}

it("adds user to a Debian-like image: uid 1000, bash, shadow, gshadow, sudo, skel", async () => {
  const root = await imageRoot({
    "etc/passwd":
      "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nsudo:x:27:\n",
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/gshadow": "root:*::\n",
    "etc/skel/.bashrc": "# bashrc\n",
    "usr/bin/bash": "",
  });
  await symlink("usr/bin", join(root, "bin"));
  await mkdir(join(root, "etc/sudoers.d"));
  const result = await ensureGuestUser(root);
  assert.deepEqual(result, { added: true, uid: 1000, gid: 1000, shell: "/bin/bash" });
  const passwd = await readFile(join(root, "etc/passwd"), "utf8");
  assert.match(
    passwd,
    /^root:x:0:0:root:\/root:\/bin\/bash\n/,
    "the image's lines stay first, unchanged",
  );
  assert.match(passwd, /\nuser:x:1000:1000::\/home\/user:\/bin\/bash\n$/);
  assert.match(await readFile(join(root, "etc/group"), "utf8"), /\nuser:x:1000:\n$/);
  assert.match(await readFile(join(root, "etc/shadow"), "utf8"), /\nuser::\d+:0:99999:7:::\n$/);
  assert.match(await readFile(join(root, "etc/gshadow"), "utf8"), /\nuser:!::\n$/);
  assert.equal(
    await readFile(join(root, "etc/sudoers.d/user"), "utf8"),
    "user ALL=(ALL:ALL) NOPASSWD: ALL\n",
  );
  assert.equal((await stat(join(root, "etc/sudoers.d/user"))).mode & 0o777, 0o440);
  assert.equal(await readFile(join(root, "home/user/.bashrc"), "utf8"), "# bashrc\n");
  assert.equal((await ensureGuestUser(root)).added, false, "idempotent");
});

it("adds user to a busybox (Alpine-like) image: sh, next free ids, no sudo", async () => {
  const root = await imageRoot({
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nalpine:x:1000:1000::/home/alpine:/bin/sh",
    "etc/group": "root:x:0:root\nalpine:x:1000:\nother:x:1001:",
    "etc/shadow": "root:!::0:::::\n",
  });
  const result = await ensureGuestUser(root);
  assert.deepEqual(result, { added: true, uid: 1001, gid: 1002, shell: "/bin/sh" });
  assert.equal(
    await readFile(join(root, "etc/passwd"), "utf8"),
    "root:x:0:0:root:/root:/bin/sh\nalpine:x:1000:1000::/home/alpine:/bin/sh\nuser:x:1001:1002::/home/user:/bin/sh\n",
  );
  await assert.rejects(stat(join(root, "etc/sudoers.d")), "no sudoers.d is created");
  assert.ok((await stat(join(root, "home/user"))).isDirectory());
});

it("keeps an image's own user account as it is", async () => {
  const root = await imageRoot({
    "etc/passwd": "root:x:0:0::/root:/bin/sh\nuser:x:501:20::/Users/user:/bin/zsh\n",
  });
  assert.deepEqual(await ensureGuestUser(root), {
    added: false,
    uid: 501,
    gid: 20,
    shell: "/bin/zsh",
  });
});

it("gives an image without /etc/passwd a root and a user", async () => {
  const root = await imageRoot({});
  await ensureGuestUser(root);
  assert.equal(
    await readFile(join(root, "etc/passwd"), "utf8"),
    "root::0:0:root:/root:/bin/sh\nuser::1000:1000::/home/user:/bin/sh\n",
  );
  assert.equal(await readFile(join(root, "etc/group"), "utf8"), "root:x:0:\nuser:x:1000:\n");
});

it("replaces a symlinked /etc/passwd instead of writing where it points", async () => {
  const outside = await imageRoot({ passwd: "root:x:0:0::/root:/bin/sh\n" });
  const root = await imageRoot({});
  await mkdir(join(root, "etc"));
  await symlink(join(outside, "passwd"), join(root, "etc/passwd"));
  await ensureGuestUser(root);
  assert.equal(await readFile(join(outside, "passwd"), "utf8"), "root:x:0:0::/root:/bin/sh\n");
});

it("writes, chowns and copies through no link the image planted (temp names, skel, home)", async () => {
  // The host files a hostile image points at: they must come out as they went in.
  const host = await imageRoot({ "key-file": "host secret\n", "skel/id_rsa": "host key\n" });
  const hostFile = join(host, "key-file");
  const before = await stat(hostFile);
  const root = await imageRoot({
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
    "etc/group": "root:x:0:\n",
    "etc/shadow": "root:*:19000:0:99999:7:::\n",
    "etc/gshadow": "root:*::\n",
  });
  for (const name of ["passwd", "group", "shadow", "gshadow"]) {
    for (const suffix of [".warren-tmp", "+", "-", ".tmp", ".new"]) {
      await symlink(hostFile, join(root, `etc/${name}${suffix}`));
    }
  }
  await symlink(join(host, "skel"), join(root, "etc/skel"));
  await ensureGuestUser(root, { setOwners: process.getuid?.() === 0 });
  assert.equal(await readFile(hostFile, "utf8"), "host secret\n", "the host file is untouched");
  const after = await stat(hostFile);
  assert.deepEqual(
    [after.uid, after.gid, after.mode, after.mtimeMs],
    [before.uid, before.gid, before.mode, before.mtimeMs],
    "nor chowned, chmodded or touched",
  );
  await assert.rejects(
    readFile(join(root, "home/user/id_rsa")),
    "a host directory's files are not copied in as /etc/skel's",
  );
  assert.match(await readFile(join(root, "etc/passwd"), "utf8"), /\nuser:x:1000:1000:/);
});
