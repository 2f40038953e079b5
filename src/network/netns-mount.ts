import { statfs, writeFile } from "node:fs/promises";
import type { RunCommand } from "./command-runner.js";

/** statfs's type of a namespace file (`nsfs`), as a live `ip netns` mount shows it. */
const NSFS_MAGIC = 0x6e736673;

/** Whether `path` is a mounted namespace (not the empty file a mount of it left behind). */
export async function isNamespaceMount(path: string): Promise<boolean> {
  const info = await statfs(path).catch(() => undefined);
  return info?.type === NSFS_MAGIC;
}

/**
 * Makes `path` (an `ip netns` name) name the namespace at `hold` again when its mount is
 * gone: under systemd the node unit's mount namespace, and with it every `/run/netns`
 * mount the server made, ends with the server, while the namespace lives on in the
 * keeper's descriptor (`hold`, `/proc/<keeper>/fd/<n>`). The file left behind is the mount
 * point, as `ip netns add` makes it.
 */
export async function remountNamespace(run: RunCommand, path: string, hold: string): Promise<void> {
  if (await isNamespaceMount(path)) return;
  await writeFile(path, "", { flag: "a", mode: 0o444 });
  // As given: canonicalizing a descriptor's link would name the mount point itself.
  await run("mount", ["--no-canonicalize", "--bind", hold, path]);
}
