import { GUEST_MAC } from "../../protocol/index.js";
import type { Accelerator, VmSpec } from "../driver.js";
import { CONSOLE_CHARDEV, CONSOLE_RING_BYTES } from "./console.js";

/** Fixed guest MAC: every guest has the same one, so snapshots need no re-addressing. */

/** One read-only image of a root disk's backing chain, nearest the guest's overlay first. */
export interface DiskLayer {
  readonly file: string;
  readonly format: "qcow2" | "raw";
}

export interface QemuArgsInput {
  readonly spec: VmSpec;
  readonly accel: Accelerator;
  readonly memoryFile: string;
  /**
   * Boot VMs map guest RAM shared (the file *is* RAM); restored ones map their snapshot's
   * image privately from a read-only descriptor (`rom=off`): the VMM can never write it.
   */
  readonly memoryShared: boolean;
  /** The guest's writable overlay (qcow2), and the images below it, nearest first. */
  readonly rootDisk: string;
  readonly rootBacking: readonly DiskLayer[];
  readonly qmpSocket: string;
  /** Restore: wait for the device state on `migrate-incoming`. */
  readonly incoming: boolean;
  /**
   * Once its files are open, QEMU drops root for this uid:gid and chroots into its runtime
   * directory (`-run-with`): taken over by its guest, it reaches nothing else by path.
   */
  readonly jail?: { readonly uid: number; readonly gid: number };
  /** See kernelCommandLine. */
  readonly kernelCommandLine: string;
  /**
   * TCG only: translated-code cache in MiB (default 64). Most of it ends up resident in every
   * VM that runs a while (its largest share of memory); smaller means retranslating more often.
   */
  readonly tcgCacheMiB?: number;
}

/**
 * The guest CPU. Under KVM, the host's without `arch-capabilities` (QEMU aborts on MSR 0x10a
 * under PVM-backed KVM otherwise, DESIGN.md); under TCG, `max`. The probe boots the same model
 * the driver runs, so a KVM that passes the probe runs VMs too.
 */
export function cpuModel(accel: Accelerator): string {
  return accel === "kvm" ? "host,-arch-capabilities" : "max";
}

/** Flags every QEMU Warren starts shares: no default devices, config or display; exit on reboot. */
export const QEMU_BASE_FLAGS = ["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"];

export interface KernelOptions {
  /** TCG: the guest's CPU is emulated. */
  readonly emulated?: boolean;
  /** TCG only: the host TSC rate handed to the guest kernel (see host-tsc.ts). */
  readonly tscKhz?: number;
  /** The root disk is larger than its image: the guest's init grows the filesystem. */
  readonly growRoot?: boolean;
  /**
   * Address-space layout randomization in the guest (default: on). QEMU's TCG (7.2 to 10.0) keys
   * translated code by virtual address, so under TCG every exec at fresh random addresses
   * retranslates its whole program (~7 MiB of code and ~200 ms of CPU per command here).
   */
  readonly aslr?: boolean;
}

export function kernelCommandLine(spec: VmSpec, options: KernelOptions = {}): string {
  const { emulated = false, tscKhz, growRoot = false, aslr = true } = options;
  return [
    "console=ttyS0 reboot=t panic=-1 quiet loglevel=3",
    "root=/dev/vda rw rootfstype=ext4 warren.agent=/dev/vdb",
    `warren.ip=${spec.guestIp} warren.gw=${spec.guestGateway}`,
    emulated && tscKhz ? `tsc_early_khz=${tscKhz}` : "",
    // The guest agent then runs its JavaScript interpreted (see host-setup/agent-init.ts).
    emulated ? "warren.interpreted=1" : "",
    growRoot ? "warren.grow=1" : "",
    aslr ? "" : "norandmaps",
    spec.images.kernelArgs ?? "",
    spec.extraKernelArgs ?? "",
  ]
    .filter(Boolean)
    .join(" ");
}

/**
 * The descriptor QEMU finds its tap on (spawn's stdio slot 3): the server opens the tap in
 * the slot's namespace and QEMU runs in an empty one (qemu-process.ts, tap-fd.ts).
 */
export const TAP_FD = 3;

function netdev(spec: VmSpec): string[] {
  const net = spec.network;
  if (net.kind === "none") return [];
  const backend =
    net.kind === "tap"
      ? `tap,id=net0,fd=${TAP_FD}`
      : `user,id=net0${net.forwards.map((f) => `,hostfwd=tcp:127.0.0.1:${f.hostPort}-:${f.guestPort}`).join("")}`;
  return ["-netdev", backend, "-device", `virtio-net-device,netdev=net0,mac=${GUEST_MAC}`];
}

/**
 * A guest's writable overlay as a block node (`-blockdev` or QMP `blockdev-add`) on an
 * explicit backing node. cache no-flush (cache=unsafe): guest flushes and QEMU's own (stop,
 * overlay switch) stop at the host page cache instead of forcing every dirty page of the
 * filesystem to disk (ext4 ordered mode), which made a fork capture wait on unrelated
 * writeback; sandbox disks are ephemeral, and a paused sandbox's files survive a server
 * restart in the page cache. auto-read-only: QEMU holds the file read-write only while
 * something writes it (see QemuVm's freezeDisk).
 */
export function overlayNode(nodeName: string, file: string, backing: string | null) {
  const cache = { direct: false, "no-flush": true };
  return {
    "node-name": nodeName,
    driver: "qcow2",
    discard: "unmap",
    cache,
    file: {
      "node-name": `${nodeName}-file`,
      driver: "file",
      filename: file,
      discard: "unmap",
      cache,
      "auto-read-only": true,
    },
    backing,
  };
}

/**
 * The root disk as explicit block nodes: the overlay on top, then every backing image named
 * with its format, read-only, the last with no backing. QEMU never reads a backing path from a
 * qcow2 header, which a VMM that wrote the image could have changed.
 */
function rootDiskArgs(input: QemuArgsInput): string[] {
  const args: string[] = [];
  const layers = input.rootBacking;
  // Bottom up, so each node exists before the one that names it as its backing.
  for (let i = layers.length - 1; i >= 0; i--) {
    const layer = layers[i] as DiskLayer;
    const below = i + 1 < layers.length ? `layer${i + 1}` : null;
    const node: Record<string, unknown> = {
      "node-name": `layer${i}`,
      driver: layer.format,
      "read-only": true,
      file: { driver: "file", filename: layer.file, "read-only": true },
    };
    if (layer.format === "qcow2") node.backing = below;
    args.push("-blockdev", JSON.stringify(node));
  }
  const top = overlayNode("root", input.rootDisk, layers.length > 0 ? "layer0" : null);
  args.push("-blockdev", JSON.stringify(top), "-device", "virtio-blk-device,drive=root");
  return args;
}

/**
 * The kernel, initramfs and command line, for a boot only. QEMU reads the whole kernel image
 * into its own heap for the firmware to fetch (fw_cfg) and keeps it for its lifetime: 13.5
 * MiB of private memory in every VMM, a quarter of an idle restored one's. A restore never
 * boots (its CPU and devices come from the snapshot, and a guest reboot ends QEMU:
 * `-no-reboot`), and the device state carries no fw_cfg contents, so it starts without them.
 */
function bootImages(input: QemuArgsInput): string[] {
  if (input.incoming) return [];
  const { images } = input.spec;
  return [
    "-kernel",
    images.kernel,
    "-initrd",
    images.initramfs,
    "-append",
    input.kernelCommandLine,
  ];
}

/**
 * QEMU's command line for one microVM. A restore must use exactly the device list of the
 * boot that produced its snapshot, so both go through here.
 */
export function qemuArgs(input: QemuArgsInput): string[] {
  const { spec, accel } = input;
  const mem = `${spec.shape.memoryMiB}M`;
  const args = [
    ...QEMU_BASE_FLAGS,
    "-machine",
    // Under TCG the kernel has no kvm-clock and needs the PIT to calibrate its timers.
    `microvm,acpi=on,${accel === "kvm" ? "pit=off,pic=off" : "pit=on,pic=on"},rtc=on,ioapic2=off,isa-serial=on,memory-backend=mem,suppress-vmdesc=on`,
    "-accel",
    accel === "kvm" ? "kvm" : `tcg,thread=multi,tb-size=${input.tcgCacheMiB ?? 64}`,
    "-cpu",
    cpuModel(accel),
    "-smp",
    String(spec.shape.vcpus),
    "-m",
    mem,
    "-object",
    `memory-backend-file,id=mem,size=${mem},mem-path=${input.memoryFile},${input.memoryShared ? "share=on" : "share=off,readonly=on,rom=off"}`,
    ...bootImages(input),
    ...rootDiskArgs(input),
    "-drive",
    `id=agent,file=${spec.images.agentDrive},format=raw,if=none,readonly=on`,
    "-device",
    "virtio-blk-device,drive=agent",
    // Host entropy for the guest's hwrng (docs/guest-boot.md); rng-builtin draws from QEMU's
    // getrandom(), so a jailed QEMU needs no /dev/urandom. Before the NIC: a VM without one
    // keeps the same transports.
    "-object",
    "rng-builtin,id=rng0",
    "-device",
    "virtio-rng-device,rng=rng0",
    ...netdev(spec),
    // The console goes to a ring buffer in QEMU, drained over QMP (console.ts): it lasts as
    // long as QEMU, not as long as a pipe to this server. Not in the migration stream (the
    // serial device is; its backend is not): snapshots from a stdio console restore.
    "-chardev",
    `ringbuf,id=${CONSOLE_CHARDEV},size=${CONSOLE_RING_BYTES}`,
    "-serial",
    `chardev:${CONSOLE_CHARDEV}`,
    // Bound by QEMU while still root, in a directory of root's outside the jail (qmp-dir.ts).
    "-qmp",
    `unix:${input.qmpSocket},server=on,wait=off`,
    "-global",
    "migration.send-configuration=off",
    "-sandbox",
    // With a jail QEMU must make the set*id calls that drop root itself; once dropped, it
    // has no way back, so denying them afterwards would add nothing.
    `on,obsolete=deny,elevateprivileges=${input.jail ? "allow" : "deny"},spawn=deny,resourcecontrol=deny`,
  ];
  if (input.jail) {
    const { uid, gid } = input.jail;
    args.push("-run-with", `user=${uid}:${gid},chroot=${input.spec.runtimeDir}`);
  }
  if (input.incoming) {
    // No self-announce after the device state loads: it makes the guest send gratuitous ARP,
    // IPv6 neighbour adverts and netlink events right when it should answer its first request
    // (~2k more TCG blocks to translate, ~40 ms under TCG). Every guest and tap keeps fixed
    // addresses and MACs, so there is nothing to announce.
    args.push("-global", "migration.announce-rounds=0", "-incoming", "defer");
  }
  return args;
}
