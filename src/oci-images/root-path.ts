import { lstat, readlink } from "node:fs/promises";
import { join, posix } from "node:path";
import { WarrenError } from "../shared/index.js";

/** Symlinks followed while resolving one path, as Linux's own limit (ELOOP beyond). */
const MAX_LINK_HOPS = 40;

/**
 * The components of an archive path, cleaned as if `/` were the root: `./a//b/../c` → `a/c`,
 * `../../etc` → `etc`. A layer cannot name anything above the root this way.
 */
export function cleanComponents(path: string): string[] {
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") out.pop();
    else out.push(part);
  }
  return out;
}

/**
 * The host path of `path` inside `root`, resolving symlinks on the way as if `root` were `/`
 * (as a chroot would: an absolute target restarts at the root, `..` stops there). The last
 * component is not followed, so callers replace a symlink rather than write through it. The
 * result is always `root` or below it; a missing component ends the walk (the rest is
 * appended as is: nothing below a missing directory can be a symlink).
 */
export async function resolveInRoot(root: string, path: string): Promise<string> {
  let pending = cleanComponents(path);
  const done: string[] = [];
  let hops = 0;
  while (pending.length > 0) {
    const [name, ...rest] = pending as [string, ...string[]];
    pending = rest;
    if (pending.length === 0) {
      done.push(name);
      break;
    }
    const host = join(root, ...done, name);
    const st = await lstat(host).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT" || err.code === "ENOTDIR") return undefined;
      throw err;
    });
    if (!st) {
      done.push(name, ...pending);
      break;
    }
    if (!st.isSymbolicLink()) {
      done.push(name);
      continue;
    }
    if (++hops > MAX_LINK_HOPS) {
      throw new WarrenError("image_invalid", `too many symlinks resolving /${path} in the image`);
    }
    const target = await readlink(host);
    const base = target.startsWith("/") ? [] : done;
    pending = [...cleanComponents(posix.join("/", ...base, target)), ...pending];
    done.length = 0;
  }
  return join(root, ...done);
}
