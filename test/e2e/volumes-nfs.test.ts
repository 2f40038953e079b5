// The volume NFS server (src/volumes/nfs) against a real guest kernel's NFSv3 client, below
// the orchestrator: the server listens in the slot's network namespace on the gateway
// address (the slot's rules let the guest, and only it, reach that port), envd's /init
// mounts the volume (nosuid, nodev) and the guest uses it as programs do; what it writes is
// on the host, what the host writes it sees; a link the guest makes to /etc is a link in the
// volume, never followed on the host; the guest's root is squashed and no set-uid bit counts.
import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { GuestArtifacts } from "../../src/host-setup/index.js";
import { listenInNamespace, NetnsSlotPool, type NetworkSlot } from "../../src/network/index.js";
import { GATEWAY_ADDRESS, VOLUME_NFS_PORT } from "../../src/protocol/index.js";
import type { Vm } from "../../src/vmm/index.js";
import type { QemuDriver } from "../../src/vmm/qemu/index.js";
import { type NfsServer, startNfsServer } from "../../src/volumes/nfs/nfs-server.js";
import {
  envdUrl,
  initEnvd,
  sandboxAt,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../helpers/guest.js";
import { leakCheck, removeLeftovers } from "../helpers/leak-check.js";
import { runPoolOptions } from "../helpers/run-env.js";

const SHAPE = { vcpus: 1, memoryMiB: 512 };

describe("volumes over NFS (real guest kernel)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let slot: NetworkSlot;
  let vm: Vm | undefined;
  let work: string;
  let server: NfsServer | undefined;
  const volume = mkdtempSync("/var/tmp/warren-nfs-volume-");
  chmodSync(volume, 0o777); // as Volumes makes a volume's top

  const run = async (command: string) => {
    const sandbox = sandboxAt(envdUrl(slot.hostAddress));
    return sandbox.commands.run(command, { user: "root", timeoutMs: 120_000 });
  };

  before(async () => {
    await removeLeftovers();
    ({ images, driver, work } = await testVmm("test-vmm-nfs"));
    mkdirSync(join(work, "run"));
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
    slot = await pool.acquire({ allowInternet: false, allowOut: [], denyOut: [] });
    server = await serveInSlot();
    vm = await driver.boot(slotVmSpec("nfs", slot, images, work, SHAPE));
    await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm);
  });

  /** The NFS server itself on a socket in the slot's namespace (Warren runs it in the guest
   * services process: test/e2e/guest-services.test.ts), here in this process, as root. */
  const serveInSlot = () =>
    startNfsServer({
      volumes: [{ key: "vol", root: volume }],
      listen: { fd: listenInNamespace(slot.netns, GATEWAY_ADDRESS, VOLUME_NFS_PORT) },
    });

  after(async () => {
    await server?.close();
    await vm?.destroy().catch(() => {});
    if (slot) await pool.release(slot).catch(() => {});
    await pool?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    rmSync(volume, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
  });

  it("mounts, writes, reads both ways, and keeps a guest's links in the volume", async () => {
    const filesystems = await run("cat /proc/filesystems");
    assert.match(filesystems.stdout, /\tnfs\n/, "the initramfs loaded the NFS client");
    // envd's /init mounts it (mount(2) from envd: no mount.nfs in the image), once.
    const mounts = [{ nfs_target: `${GATEWAY_ADDRESS}:/vol`, path: "/mnt/vol" }];
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user", volumeMounts: mounts });
    await initEnvd(envdUrl(slot.hostAddress), { volumeMounts: mounts });
    const mounted = await run("grep ' /mnt/vol ' /proc/mounts");
    assert.equal(mounted.stdout.split("\n").filter(Boolean).length, 1, mounted.stdout);
    assert.match(mounted.stdout, /nfs .*vers=3.*hard/);
    assert.match(mounted.stdout, /nosuid/, "MS_NOSUID");
    assert.match(mounted.stdout, /nodev/, "MS_NODEV");
    await run(
      "echo hello > /mnt/vol/hello.txt && mkdir -p /mnt/vol/a/b && seq 1 1000 > /mnt/vol/a/b/n && ln -s /etc /mnt/vol/etc-link && chown 1000:1000 /mnt/vol/hello.txt",
    );
    assert.equal(readFileSync(join(volume, "hello.txt"), "utf8"), "hello\n");
    assert.equal(readFileSync(join(volume, "a", "b", "n"), "utf8").split("\n").length, 1001);
    assert.equal(readlinkSync(join(volume, "etc-link")), "/etc");
    writeFileSync(join(volume, "from-host.txt"), "from the host\n");
    assert.equal((await run("cat /mnt/vol/from-host.txt")).stdout, "from the host\n");
    assert.equal((await run("stat -c %u:%g /mnt/vol/hello.txt")).stdout.trim(), "1000:1000");
    // Root squashed: what the guest's root makes, or chowns to root, is 65534's on the host.
    await run("touch /mnt/vol/by-root && chown 0:0 /mnt/vol/by-root");
    const byRoot = statSync(join(volume, "by-root"));
    assert.deepEqual([byRoot.uid, byRoot.gid], [65534, 65534]);
    // No set-uid bit stored, and one planted on the host is never shown to the guest.
    await run("cp /usr/bin/id /mnt/vol/id && chmod 4755 /mnt/vol/id");
    assert.equal(statSync(join(volume, "id")).mode & 0o7777, 0o755);
    chownSync(join(volume, "id"), 0, 0);
    chmodSync(join(volume, "id"), 0o4755);
    // (after the 1 s the guest caches attributes for: what it sees is the server's answer)
    assert.equal((await run("sleep 2; stat -c %a /mnt/vol/id")).stdout.trim(), "755");
    const sandbox = sandboxAt(envdUrl(slot.hostAddress));
    const id = await sandbox.commands.run("/mnt/vol/id -u", { user: "user" });
    assert.equal(id.stdout.trim(), "1000", "runs as its caller");
    // git-like use: rename over, many small files, remove a tree.
    await run(
      "cd /mnt/vol && for i in $(seq 1 200); do echo $i > f$i; done && mv f1 f2 && rm -r a && ls | wc -l",
    );
    assert.equal((await run("ls /mnt/vol | wc -l")).stdout.trim(), String(199 + 5));
    // O_EXCL creates (lock files, `set -C`) are NFS EXCLUSIVE creates: once, then EEXIST.
    const locked = await run(
      "set -C; echo 1 > /mnt/vol/lock && echo first; echo 2 > /mnt/vol/lock 2>/dev/null || echo taken; cat /mnt/vol/lock",
    );
    assert.equal(locked.stdout, "first\ntaken\n1\n");
  });

  it("carries on against a new server (a resumed or forked guest's case), and the guest's user writes at the top", async () => {
    await server?.close();
    server = await serveInSlot();
    assert.equal((await run("cat /mnt/vol/hello.txt")).stdout, "hello\n");
    const sandbox = sandboxAt(envdUrl(slot.hostAddress));
    await sandbox.commands.run("echo mine > /mnt/vol/by-user", { user: "user" });
    assert.equal(readFileSync(join(volume, "by-user"), "utf8"), "mine\n");
  });

  it("answers nothing to the guest but NFS: other ports of the gateway stay closed", async () => {
    const probe = await run(
      `timeout 5 bash -c 'echo > /dev/tcp/${GATEWAY_ADDRESS}/22' 2>&1 && echo open || echo closed`,
    );
    assert.equal(probe.stdout.trim().split("\n").at(-1), "closed");
  });
});
