import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { VmSpec } from "../driver.js";
import { kernelCommandLine, qemuArgs } from "./args.js";
import { hostTscKhz } from "./host-tsc.js";

const spec: VmSpec = {
  id: "abc",
  shape: { vcpus: 2, memoryMiB: 512 },
  images: {
    kernel: "/k",
    kernelVersion: "6.1",
    fingerprint: "f1",
    initramfs: "/i",
    agentDrive: "/a",
  },
  baseDisk: "/base.ext4",
  network: { kind: "tap", netns: "warren-3", tap: "tap0" },
  runtimeDir: "/run/abc",
  guestIp: "169.254.0.21/30",
  guestGateway: "169.254.0.22",
};

const input = {
  spec,
  memoryFile: "/run/abc/memory.img",
  memoryShared: true,
  rootDisk: "/run/abc/disk.qcow2",
  rootBacking: [
    { file: "/snap/disk.qcow2", format: "qcow2" as const },
    { file: "/base.ext4", format: "raw" as const },
  ],
  qmpSocket: "/var/lib/warren/qmp/abc.sock",
  incoming: false,
  kernelCommandLine: "console=ttyS0 warren.test=1",
};

function value(args: string[], flag: string): string[] {
  return args.flatMap((a, i) => (a === flag ? [args[i + 1] ?? ""] : []));
}

describe("qemuArgs", () => {
  it("builds a TCG microvm with shared guest RAM, both drives, the tap NIC and QMP", () => {
    const args = qemuArgs({ ...input, accel: "tcg" });
    assert.deepEqual(value(args, "-accel"), ["tcg,thread=multi,tb-size=64"]);
    const bigger = qemuArgs({ ...input, accel: "tcg", tcgCacheMiB: 128 });
    assert.deepEqual(value(bigger, "-accel"), ["tcg,thread=multi,tb-size=128"]);
    assert.match(value(args, "-machine")[0] ?? "", /^microvm,.*pit=on,pic=on.*ioapic2=off/);
    assert.deepEqual(value(args, "-object"), [
      "memory-backend-file,id=mem,size=512M,mem-path=/run/abc/memory.img,share=on",
      "rng-builtin,id=rng0",
    ]);
    assert.ok(value(args, "-device").includes("virtio-rng-device,rng=rng0"), "an entropy source");
    assert.deepEqual(value(args, "-smp"), ["2"]);
    assert.ok(
      value(args, "-drive").some((d) => d.startsWith("id=agent,") && d.includes("readonly=on")),
    );
    assert.deepEqual(value(args, "-netdev"), ["tap,id=net0,fd=3"]);
    assert.deepEqual(value(args, "-append"), ["console=ttyS0 warren.test=1"]);
    assert.ok(!args.includes("-incoming"));
    assert.ok(value(args, "-sandbox")[0]?.startsWith("on,"));
    // The console is a ring in QEMU (drained over QMP), never a pipe to the server.
    assert.deepEqual(value(args, "-chardev"), ["ringbuf,id=console,size=65536"]);
    assert.deepEqual(value(args, "-serial"), ["chardev:console"]);
    assert.deepEqual(value(args, "-qmp"), ["unix:/var/lib/warren/qmp/abc.sock,server=on,wait=off"]);
  });

  it("maps a snapshot's RAM privately and waits for the device state on restore", () => {
    const args = qemuArgs({ ...input, accel: "tcg", memoryShared: false, incoming: true });
    // Opened read-only, mapped private and writable: the VMM can never write the image.
    assert.match(value(args, "-object")[0] ?? "", /share=off,readonly=on,rom=off$/);
    assert.deepEqual(value(args, "-incoming"), ["defer"]);
    assert.ok(args.includes("migration.announce-rounds=0"));
    // Nothing to boot: QEMU would hold the kernel image in its heap for nothing.
    for (const flag of ["-kernel", "-initrd", "-append"]) assert.ok(!args.includes(flag), flag);
  });

  it("passes the root disk's whole backing chain explicitly, read-only below the overlay", () => {
    const nodes = value(qemuArgs({ ...input, accel: "tcg" }), "-blockdev").map((n) =>
      JSON.parse(n),
    );
    assert.deepEqual(
      nodes.map((n) => [n["node-name"], n.file.filename, n.backing, n["read-only"]]),
      [
        ["layer1", "/base.ext4", undefined, true],
        ["layer0", "/snap/disk.qcow2", "layer1", true],
        ["root", "/run/abc/disk.qcow2", "layer0", undefined],
      ],
    );
    // A chain's bottom qcow2 says "no backing" rather than leaving QEMU to read its header.
    const alone = qemuArgs({ ...input, accel: "tcg", rootBacking: input.rootBacking.slice(0, 1) });
    assert.equal(JSON.parse(value(alone, "-blockdev")[0] ?? "{}").backing, null);
  });

  it("drops root for the VM's own uid and chroots into its runtime dir", () => {
    const args = qemuArgs({
      ...input,
      accel: "tcg",
      jail: { uid: 1_500_000_007, gid: 1_500_000_007 },
    });
    assert.deepEqual(value(args, "-run-with"), ["user=1500000007:1500000007,chroot=/run/abc"]);
    assert.match(value(args, "-sandbox")[0] ?? "", /elevateprivileges=allow/);
    const unjailed = qemuArgs({ ...input, accel: "tcg" });
    assert.deepEqual(value(unjailed, "-run-with"), []);
    assert.match(value(unjailed, "-sandbox")[0] ?? "", /elevateprivileges=deny/);
  });

  it("uses the host CPU and kvm-clock under KVM", () => {
    const args = qemuArgs({ ...input, accel: "kvm" });
    assert.deepEqual(value(args, "-accel"), ["kvm"]);
    assert.match(value(args, "-machine")[0] ?? "", /pit=off,pic=off/);
  });
});

describe("kernelCommandLine", () => {
  it("hints the TSC rate and runs envd interpreted only when the CPU is emulated", () => {
    const tcg = kernelCommandLine(spec, { emulated: true, tscKhz: 2_096_023 });
    assert.match(tcg, /tsc_early_khz=2096023 warren\.interpreted=1/);
    const kvm = kernelCommandLine(spec, { tscKhz: 2_096_023 });
    assert.doesNotMatch(kvm, /tsc_early_khz|warren\.interpreted/);
  });

  it("asks the guest to grow its root filesystem only when the disk was enlarged", () => {
    assert.match(kernelCommandLine(spec, { growRoot: true }), /warren\.grow=1/);
    assert.doesNotMatch(kernelCommandLine(spec), /warren\.grow/);
  });

  it("turns address-space randomization off only when asked", () => {
    assert.match(kernelCommandLine(spec, { aslr: false }), /(^| )norandmaps( |$)/);
    assert.doesNotMatch(kernelCommandLine(spec), /norandmaps/);
  });

  it("puts the slot's guest address and the images' kernel flags on the kernel command line", () => {
    assert.match(
      kernelCommandLine(spec),
      /warren\.ip=169\.254\.0\.21\/30 warren\.gw=169\.254\.0\.22/,
    );
    const flagged = { ...spec, images: { ...spec.images, kernelArgs: "tsc=reliable" } };
    assert.match(kernelCommandLine(flagged), / tsc=reliable$/);
  });
});

describe("hostTscKhz", () => {
  it("reads cpu MHz as kHz", () =>
    assert.equal(hostTscKhz("model\t: x\ncpu MHz\t\t: 2096.023\n"), 2_096_023));
  it("is undefined without it", () => assert.equal(hostTscKhz("flags: fpu\n"), undefined));
});
