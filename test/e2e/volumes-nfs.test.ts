// The volume NFS server (src/volumes/nfs) against a real guest kernel's NFSv3 client, before
// sandboxes mount volumes themselves: the server runs in the slot's network namespace on the
// gateway address (with the two rules that lets it serve there), the guest mounts a volume
// and uses it as programs do; what it writes is on the host, what the host writes it sees;
// a link the guest makes to /etc is a link in the volume, never followed on the host.
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { GuestArtifacts } from "../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../src/network/index.js";
import { GATEWAY_ADDRESS } from "../../src/protocol/index.js";
import type { Vm } from "../../src/vmm/index.js";
import type { QemuDriver } from "../../src/vmm/qemu/index.js";
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

const execFileP = promisify(execFile);
const SHAPE = { vcpus: 1, memoryMiB: 512 };
const SERVER = fileURLToPath(new URL("../helpers/nfs-server-main.ts", import.meta.url));
const TSX = import.meta.resolve("tsx");

describe("volumes over NFS (real guest kernel)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let slot: NetworkSlot;
  let vm: Vm | undefined;
  let work: string;
  let server: ChildProcess | undefined;
  const volume = mkdtempSync("/var/tmp/warren-nfs-volume-");

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
    // The server in the slot's namespace, on the gateway address only the guest reaches:
    // its connections in, and their replies out (the namespace refuses both otherwise).
    const inNetns = (...args: string[]) =>
      execFileP("nsenter", [`--net=${slot.netnsPath}`, "iptables", ...args]);
    await inNetns(
      "-I",
      "INPUT",
      "-i",
      "tap0",
      "-p",
      "tcp",
      "-d",
      GATEWAY_ADDRESS,
      "--dport",
      "2049",
      "-j",
      "ACCEPT",
    );
    await inNetns(
      "-I",
      "OUTPUT",
      "-o",
      "tap0",
      "-p",
      "tcp",
      "-s",
      GATEWAY_ADDRESS,
      "--sport",
      "2049",
      "-m",
      "conntrack",
      "--ctstate",
      "ESTABLISHED",
      "-j",
      "ACCEPT",
    );
    server = spawn(
      "nsenter",
      [
        `--net=${slot.netnsPath}`,
        process.execPath,
        "--import",
        TSX,
        SERVER,
        volume,
        GATEWAY_ADDRESS,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    await new Promise<void>((resolve, reject) => {
      server?.stdout?.once("data", () => resolve());
      server?.once("exit", (code) => reject(new Error(`the NFS server exited (${code})`)));
    });
    vm = await driver.boot(slotVmSpec("nfs", slot, images, work, SHAPE));
    await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm);
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
  });

  after(async () => {
    server?.kill("SIGKILL");
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
    const mount = await run(
      `mkdir -p /mnt/vol && mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,soft,timeo=50,retrans=1,addr=${GATEWAY_ADDRESS} ${GATEWAY_ADDRESS}:/vol /mnt/vol && echo mounted`,
    ).catch((err: { stdout?: string; stderr?: string; message?: string }) => ({
      stdout: "",
      stderr: `${err.message} ${err.stderr ?? ""}`,
    }));
    assert.equal(mount.stdout.trim(), "mounted", mount.stderr);
    await run(
      "echo hello > /mnt/vol/hello.txt && mkdir -p /mnt/vol/a/b && seq 1 1000 > /mnt/vol/a/b/n && ln -s /etc /mnt/vol/etc-link && chown 1000:1000 /mnt/vol/hello.txt",
    );
    assert.equal(readFileSync(join(volume, "hello.txt"), "utf8"), "hello\n");
    assert.equal(readFileSync(join(volume, "a", "b", "n"), "utf8").split("\n").length, 1001);
    assert.equal(readlinkSync(join(volume, "etc-link")), "/etc");
    writeFileSync(join(volume, "from-host.txt"), "from the host\n");
    assert.equal((await run("cat /mnt/vol/from-host.txt")).stdout, "from the host\n");
    assert.equal((await run("stat -c %u:%g /mnt/vol/hello.txt")).stdout.trim(), "1000:1000");
    // git-like use: rename over, many small files, remove a tree.
    await run(
      "cd /mnt/vol && for i in $(seq 1 200); do echo $i > f$i; done && mv f1 f2 && rm -r a && ls | wc -l",
    );
    assert.equal((await run("ls /mnt/vol | wc -l")).stdout.trim(), String(199 + 3));
    // O_EXCL creates (lock files, `set -C`) are NFS EXCLUSIVE creates: once, then EEXIST.
    const locked = await run(
      "set -C; echo 1 > /mnt/vol/lock && echo first; echo 2 > /mnt/vol/lock 2>/dev/null || echo taken; cat /mnt/vol/lock",
    );
    assert.equal(locked.stdout, "first\ntaken\n1\n");
  });
});
