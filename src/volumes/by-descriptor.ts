import { constants } from "node:fs";
import { type FileHandle, mkdir, open } from "node:fs/promises";

/**
 * Reaching names under a directory a hostile guest writes too, without resolving a path as
 * text: each step opens a name in an already open directory (`/proc/self/fd/<dir>/<name>`:
 * the kernel looks `name` up in that very directory) with O_NOFOLLOW, so a link there fails
 * the step instead of leading anywhere.
 */

export const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
/** O_NONBLOCK: a FIFO a guest left there must not hang the open. */
export const ENTRY_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** `name` in the directory open as `dir`, as a path the kernel resolves from that directory. */
export function inDir(dir: FileHandle, name: string): string {
  return `/proc/self/fd/${dir.fd}/${name}`;
}

/** A step of a walk failed: `at` is how many names were walked before it. */
export class WalkError extends Error {
  override readonly name = "WalkError";
  constructor(
    readonly at: number,
    override readonly cause: unknown,
  ) {
    super((cause as Error)?.message ?? String(cause));
  }
}

/**
 * Opens `root` (trusted: made by Warren) and then each of `names` in turn as a directory;
 * `create` makes missing ones (0755, `owner`'s when given). The caller closes what it gets.
 */
export async function openDirectory(
  root: string,
  names: readonly string[],
  create = false,
  owner?: { readonly uid: number; readonly gid: number },
): Promise<FileHandle> {
  let dir = await open(root, DIR_FLAGS).catch((err: unknown) => {
    throw new WalkError(0, err);
  });
  try {
    for (let i = 0; i < names.length; i++) {
      const name = names[i] as string;
      let made = false;
      if (create) {
        made = await mkdir(inDir(dir, name), { mode: 0o755 }).then(
          () => true,
          (err: NodeJS.ErrnoException) => {
            if (err.code !== "EEXIST") throw new WalkError(i, err);
            return false;
          },
        );
      }
      const next = await open(inDir(dir, name), DIR_FLAGS).catch((err: unknown) => {
        throw new WalkError(i, err);
      });
      // Through the handle: what was made, not what a guest may have put at the name since.
      if (made && owner) {
        await next.chown(owner.uid, owner.gid).catch(async (err: unknown) => {
          await next.close();
          throw new WalkError(i, err);
        });
      }
      await dir.close();
      dir = next;
    }
    return dir;
  } catch (err) {
    await dir.close();
    throw err;
  }
}
