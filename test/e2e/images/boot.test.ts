import assert from "node:assert/strict";
import { readFile, stat } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import {
  ensureHostSetup,
  type GuestArtifacts,
  readManifest,
} from "../../../src/host-setup/index.js";
import { ENVD_VERSION } from "../../../src/protocol/index.js";
import { runEnv } from "../../helpers/run-env.js";
import { startVm, type TestVm } from "./vm.js";

// The test images cache: built once per machine (the test command sets it up before the
// files run) and never deleted here.
const { dataDir, imagesDir } = runEnv();

describe("guest artifacts", () => {
  let artifacts: GuestArtifacts;

  before(async () => {
    artifacts = await ensureHostSetup({ dataDir, imagesDir });
  });

  it("are all recorded in the manifest with their hashes", async () => {
    const manifest = await readManifest(artifacts.manifest);
    for (const name of ["kernel", "initramfs", "agent-drive", "base-rootfs"] as const) {
      const record = manifest.artifacts[name];
      assert.ok(record, `${name} is in the manifest`);
      assert.match(record.sha256, /^[0-9a-f]{64}$/);
      assert.ok(Object.keys(record.inputs).length > 0);
    }
    assert.match(artifacts.kernelVersion, /^\d+\.\d+\.\d+-\d+-cloud-amd64$/);
  });

  it("a second setup run does nothing and takes well under a second", async () => {
    const files = [
      artifacts.kernel,
      artifacts.initramfs,
      artifacts.agentDrive,
      artifacts.baseRootfs,
    ];
    const mtimes = async () => Promise.all(files.map(async (f) => (await stat(f)).mtimeMs));
    const manifestBefore = await readFile(artifacts.manifest, "utf8");
    const mtimesBefore = await mtimes();
    const started = performance.now();
    await ensureHostSetup({ dataDir, imagesDir, progress: null });
    const elapsedMs = performance.now() - started;
    assert.ok(elapsedMs < 1000, `second run took ${Math.round(elapsedMs)} ms`);
    assert.equal(await readFile(artifacts.manifest, "utf8"), manifestBefore);
    assert.deepEqual(await mtimes(), mtimesBefore);
  });

  describe("a microVM booted from them (TCG)", () => {
    let vm: TestVm | undefined;
    let sbx: Sandbox;

    before(async () => {
      vm = await startVm(artifacts);
    });
    after(async () => {
      await vm?.stop();
    });

    it("answers envd /health with 204 within 60 s", async (t) => {
      assert.ok(vm);
      const bootMs = await vm.waitHealthy(60_000);
      t.diagnostic(`QEMU start to envd /health 204: ${bootMs} ms`);
      process.env.E2B_DEBUG = "true";
      process.env.E2B_SANDBOX_URL = vm.url;
      sbx = await Sandbox.create();
    });

    it("runs commands through envd as `user` with E2B's base tools", async () => {
      const result = await sbx.commands.run(
        "python --version; whoami; pwd; sudo -n true && echo sudo-ok; node --version; npm --version; tput -T xterm cols; git --version; curl --version | head -1",
        { timeoutMs: 120_000 },
      );
      const lines = result.stdout.trim().split("\n");
      assert.match(lines[0] ?? "", /^Python 3\.11\./);
      assert.deepEqual(lines.slice(1, 4), ["user", "/home/user", "sudo-ok"]);
      assert.match(lines[4] ?? "", /^v\d+\./);
      assert.match(lines[5] ?? "", /^\d+\.\d+\.\d+$/);
      assert.equal(lines[6], "80");
      assert.match(lines[7] ?? "", /^git version/);
      assert.match(lines[8] ?? "", /^curl \d/);
    });

    it("follows the boot contract: mounts, network, PID 1, agent drive", async () => {
      const script = [
        "cat /proc/1/comm",
        "cat /.warren/VERSION",
        'awk \'$2=="/.warren"||$2=="/"||$2=="/tmp"||$2=="/run"||$2=="/dev/shm"||$2=="/dev/pts" {print $2, $3, substr($4,1,2)}\' /proc/mounts | sort',
        "ip -4 -o addr show eth0 | awk '{print $4}'",
        "ip route show default | awk '{print $3}'",
        "cat /etc/resolv.conf",
        "hostname",
        "readlink /dev/fd",
        "umask",
      ].join("; ");
      const { stdout } = await sbx.commands.run(script, { user: "root", timeoutMs: 60_000 });
      const out = stdout.trim().split("\n");
      assert.equal(out[0], "tini");
      assert.match(stdout, new RegExp(`^envd ${ENVD_VERSION.replaceAll(".", "\\.")}$`, "m"));
      assert.match(stdout, /^node v\d+/m);
      for (const mount of [
        "/ ext4 rw",
        "/.warren ext4 ro",
        "/dev/pts devpts rw",
        "/dev/shm tmpfs rw",
        "/run tmpfs rw",
        "/tmp tmpfs rw",
      ])
        assert.ok(out.includes(mount), `${mount} in\n${stdout}`);
      assert.ok(out.includes("10.0.2.15/24"));
      assert.ok(out.includes("10.0.2.2"));
      assert.ok(out.includes("nameserver 10.0.2.3"));
      assert.ok(out.includes("sandbox"));
      assert.ok(out.includes("/proc/self/fd"));
      assert.equal(out.at(-1), "0022");
    });
  });

  describe("a microVM whose root disk does not exist", () => {
    let vm: TestVm | undefined;
    after(async () => {
      await vm?.stop();
    });

    it("says why on the console and powers off instead of hanging", async () => {
      vm = await startVm(artifacts, { root: "/dev/vdz" });
      await vm.waitExit(60_000);
      assert.match(
        vm.serial(),
        /warren initramfs: root device \/dev\/vdz did not appear; powering off/,
      );
    });
  });
});
