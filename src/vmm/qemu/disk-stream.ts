import { spawn } from "node:child_process";
import type { FileHandle } from "node:fs/promises";
import { Duplex } from "node:stream";
import { VmmError } from "../errors.js";
import type { DiskLayer } from "./args.js";
import { QEMU_BINARY, vmmEnv } from "./qemu-process.js";
import { QmpClient } from "./qmp-client.js";
import type { VmmIdentity } from "./vmm-ids.js";

/** How long one flatten's copy may take (background work, at the lowest CPU priority). */
const STREAM_TIMEOUT_MS = 60 * 60_000;
const STDERR_LIMIT = 4096;

/** One image of the chain a stream reads, open; the top one read-write, the rest read-only. */
export interface OpenLayer extends Pick<DiskLayer, "format"> {
  readonly handle: FileHandle;
}

export interface StreamInput {
  /** The disk to fill and restack (qcow2, open read-write) and every image below it. */
  readonly layers: readonly OpenLayer[];
  /** Index in `layers` of the image the disk is to stand on directly. */
  readonly base: number;
  /** The backing name written into the disk's header (Warren's relative name). */
  readonly backingName: string;
  /** The uid the copying QEMU runs as, from its first instruction. */
  readonly identity: VmmIdentity;
}

/** The block nodes of the chain, bottom first: `layer<i>` on `layer<i+1>`, images by fd set. */
function blockdevArgs(layers: readonly OpenLayer[]): string[] {
  const args: string[] = [];
  for (let i = layers.length - 1; i >= 0; i--) {
    const layer = layers[i] as OpenLayer;
    const readOnly = i > 0;
    const node: Record<string, unknown> = {
      "node-name": `layer${i}`,
      driver: layer.format,
      "read-only": readOnly,
      file: { driver: "file", filename: `/dev/fdset/${i + 1}`, "read-only": readOnly },
    };
    if (layer.format === "qcow2") node.backing = i + 1 < layers.length ? `layer${i + 1}` : null;
    args.push("-blockdev", JSON.stringify(node));
  }
  return args;
}

/**
 * Copies into a disk everything the layers between it and `base` hold, and restacks it on
 * `base` (QEMU's `block-stream`: what `qemu-img rebase` does in safe mode), in a QEMU that is
 * never root: it starts under a VMM uid of its own, with no machine, and is handed each
 * image as a descriptor the server opened (`-add-fd`: the uid itself may open none of them),
 * the chain as explicit block nodes (no backing name is followed), its QMP monitor on its
 * stdin and stdout, its environment PATH alone, the seccomp sandbox on. The images come from
 * VMMs; whatever in them could make an image tool misbehave, it does so without root.
 */
export async function streamDisk(input: StreamInput): Promise<void> {
  const { layers, identity } = input;
  const fds = layers.map((layer) => layer.handle.fd);
  // Killed with the server, however it ends (setpriv: the parent-death signal survives exec,
  // and nothing changes its credentials after it is set); at the lowest CPU priority.
  const args = [
    "--pdeathsig",
    "KILL",
    "--no-new-privs",
    "--",
    "nice",
    "-n",
    "19",
    QEMU_BINARY,
    "-nodefaults",
    "-no-user-config",
    "-nographic",
    "-machine",
    "none",
    "-name",
    "warren-flatten,process=warren-flatten",
    "-sandbox",
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    "-chardev",
    "stdio,id=qmp,signal=off",
    "-mon",
    "chardev=qmp,mode=control",
    ...fds.flatMap((_, i) => ["-add-fd", `fd=${3 + i},set=${i + 1}`]),
    ...blockdevArgs(layers),
  ];
  const child = spawn("setpriv", args, {
    uid: identity.uid,
    gid: identity.gid,
    env: vmmEnv(),
    cwd: "/",
    stdio: ["pipe", "pipe", "pipe", ...fds],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (text: string) => {
    stderr = (stderr + text).slice(-STDERR_LIMIT);
  });
  const exited = new Promise<number | null>((resolve) => {
    child.once("error", () => resolve(null));
    child.once("exit", (code) => resolve(code));
  });
  const held: { qmp?: QmpClient } = {};
  const copy = async () => {
    if (!child.stdout || !child.stdin) throw new Error("QEMU has no monitor");
    const qmp = await QmpClient.attach(
      Duplex.from({ readable: child.stdout, writable: child.stdin }),
    );
    held.qmp = qmp;
    const completed = qmp.waitForEvent(
      "BLOCK_JOB_COMPLETED",
      (event) => event.data?.device === "flatten",
      STREAM_TIMEOUT_MS,
    );
    await qmp.execute("block-stream", {
      "job-id": "flatten",
      device: "layer0",
      "base-node": `layer${input.base}`,
      "backing-file": input.backingName,
    });
    const event = await completed;
    if (typeof event.data?.error === "string") throw new Error(event.data.error);
    await qmp.execute("quit").catch(() => {});
    const code = await Promise.race([
      exited,
      new Promise<"late">((resolve) => setTimeout(() => resolve("late"), 10_000)),
    ]);
    if (code !== 0) throw new Error(`QEMU ended with ${code}`);
  };
  try {
    await copy();
  } catch (err) {
    const why = stderr.trim() ? ` (${stderr.trim()})` : "";
    throw new VmmError(`copying the disk failed: ${(err as Error).message}${why}`, undefined, {
      cause: err,
    });
  } finally {
    held.qmp?.close();
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
  }
}
