import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";

/** Ports other test files use are below this; these tests pick the first free one above. */
const FIRST_PORT = 50100;
const GUEST_ENVD_PORT = 49983;

/**
 * The host's TSC rate for `tsc_early_khz=` (as src/vmm/qemu/host-tsc.ts does): under TCG the
 * guest kernel often fails to calibrate its TSC against the emulated PIT on a busy host, and
 * then hangs before printing anything else.
 */
function hostTscKhz(): number | undefined {
  const match = /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync("/proc/cpuinfo", "utf8"));
  return match?.[1] ? Math.round(Number(match[1]) * 1000) : undefined;
}

async function freePort(): Promise<number> {
  for (let port = FIRST_PORT; port < FIRST_PORT + 100; port++) {
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port in ${FIRST_PORT}-${FIRST_PORT + 99}`);
}

export interface TestVm {
  /** envd in the guest, through QEMU's user-network port forward. */
  readonly url: string;
  readonly process: ChildProcess;
  /** What the guest printed on its serial console so far. */
  serial(): string;
  /** Resolves with ms from QEMU's start once envd answers /health with 204. */
  waitHealthy(timeoutMs: number): Promise<number>;
  /** Resolves with QEMU's exit code once it exits (rejects after timeoutMs). */
  waitExit(timeoutMs: number): Promise<number | null>;
  stop(): Promise<void>;
}

/**
 * Boots the guest artifacts with a raw QEMU microvm command line under TCG, the way the VMM
 * driver will (docs/guest-boot.md), but with user networking (10.0.2.x) and a host port
 * forwarded to envd. The root disk is a qcow2 overlay of base.ext4 in a temp directory.
 */
export async function startVm(
  artifacts: GuestArtifacts,
  options: { root?: string; memoryMiB?: number } = {},
): Promise<TestVm> {
  const dir = await mkdtemp(join(tmpdir(), "warren-vm-"));
  const overlay = join(dir, "root.qcow2");
  const serialLog = join(dir, "serial.log");
  execFileSync("qemu-img", [
    "create",
    "-q",
    "-f",
    "qcow2",
    "-F",
    "raw",
    "-b",
    artifacts.baseRootfs,
    overlay,
  ]);
  const port = await freePort();
  const append = [
    "console=ttyS0 reboot=t panic=-1 quiet loglevel=3",
    `root=${options.root ?? "/dev/vda"} rw rootfstype=ext4 warren.agent=/dev/vdb`,
    "warren.ip=10.0.2.15/24 warren.gw=10.0.2.2 warren.dns=10.0.2.3",
    hostTscKhz() ? `tsc_early_khz=${hostTscKhz()}` : "",
  ].join(" ");
  // biome-ignore format: one QEMU option per line
  const args = [
    "-accel", "tcg,thread=multi,tb-size=64",
    "-M", "microvm,acpi=on,pit=on,pic=on,rtc=on,ioapic2=off,isa-serial=on",
    "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
    "-serial", `file:${serialLog}`,
    "-cpu", "max", "-smp", "1", "-m", String(options.memoryMiB ?? 512),
    "-kernel", artifacts.kernel, "-initrd", artifacts.initramfs, "-append", append,
    "-drive", `id=root,file=${overlay},format=qcow2,if=none`,
    "-device", "virtio-blk-device,drive=root",
    "-drive", `id=agent,file=${artifacts.agentDrive},format=raw,if=none,readonly=on`,
    "-device", "virtio-blk-device,drive=agent",
    "-netdev", `user,id=n0,hostfwd=tcp:127.0.0.1:${port}-:${GUEST_ENVD_PORT}`,
    "-device", "virtio-net-device,netdev=n0,mac=02:fc:00:00:00:15",
  ];
  const started = performance.now();
  const child = spawn("qemu-system-x86_64", args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  const serial = () =>
    `${existsSync(serialLog) ? readFileSync(serialLog, "utf8") : ""}${stderr ? `\n[qemu stderr] ${stderr}` : ""}`;
  const url = `http://127.0.0.1:${port}`;

  return {
    url,
    process: child,
    serial,
    async waitHealthy(timeoutMs) {
      const deadline = started + timeoutMs;
      while (performance.now() < deadline) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(
            `QEMU exited (${child.exitCode ?? child.signalCode}) before envd was up:\n${serial()}`,
          );
        const status = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).then(
          (res) => res.status,
          () => 0,
        );
        if (status === 204) return Math.round(performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error(`envd did not answer /health within ${timeoutMs} ms:\n${serial()}`);
    },
    async waitExit(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`QEMU still running after ${timeoutMs} ms:\n${serial()}`)),
          timeoutMs,
        );
      });
      try {
        return await Promise.race([exited, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
