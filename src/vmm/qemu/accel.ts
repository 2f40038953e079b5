import { spawn } from "node:child_process";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import type { Accelerator } from "../driver.js";
import { cpuModel, QEMU_BASE_FLAGS } from "./args.js";
import { QEMU_BINARY, vmmEnv } from "./qemu-process.js";

export interface AccelProbeResult {
  readonly accel: Accelerator;
  readonly reason: string;
  readonly probeMs: number;
}

/** Printed by the kernel when it hands over to the initramfs: the guest really booted. */
const BOOTED_MARKER = " as init process";

/**
 * Decides between KVM and TCG by booting the guest kernel under KVM, time-boxed. /dev/kvm
 * existing is not enough: PVM-backed KVM hangs stock kernels (DESIGN.md), so only a kernel
 * that reaches its init counts.
 */
export async function probeAccelerator(
  kernel: string,
  initramfs: string,
  timeoutMs = 15_000,
): Promise<AccelProbeResult> {
  const started = Date.now();
  const done = (accel: Accelerator, reason: string): AccelProbeResult => ({
    accel,
    reason,
    probeMs: Date.now() - started,
  });
  try {
    await access("/dev/kvm", constants.R_OK | constants.W_OK);
  } catch {
    return done("tcg", "/dev/kvm is missing or not accessible");
  }
  const args = [
    ...QEMU_BASE_FLAGS,
    "-machine",
    "microvm,acpi=on",
    "-accel",
    "kvm",
    "-cpu",
    cpuModel("kvm"),
    "-m",
    "256",
    "-kernel",
    kernel,
    "-initrd",
    initramfs,
    "-append",
    "console=ttyS0 loglevel=7 panic=-1 reboot=t rdinit=/bin/false",
    "-serial",
    "stdio",
  ];
  return new Promise((resolve) => {
    const child = spawn(QEMU_BINARY, args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: vmmEnv(),
      cwd: "/",
    });
    let output = "";
    const finish = (result: AccelProbeResult) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      resolve(result);
    };
    const timer = setTimeout(
      () => finish(done("tcg", `a KVM guest did not reach its init within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onData = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-16_384);
      if (output.includes(BOOTED_MARKER)) finish(done("kvm", "a KVM guest booted to its init"));
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("error", (err) => finish(done("tcg", `cannot run ${QEMU_BINARY}: ${err.message}`)));
    child.once("exit", (code) => {
      if (!output.includes(BOOTED_MARKER)) {
        finish(
          done(
            "tcg",
            `KVM guest exited (${code}) before its init: ${output.trim().split("\n").at(-1) ?? ""}`,
          ),
        );
      }
    });
  });
}
