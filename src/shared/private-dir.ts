import { chmod, lstat, mkdir } from "node:fs/promises";

/**
 * Makes `dir` (0700) or checks it: a directory, not a link, of this process's uid, 0700.
 * `refuse` makes the error for one that is not (`<what> <dir> is not a directory of uid n`).
 */
export async function ensurePrivateDir(
  dir: string,
  refuse: (message: string) => Error,
  what: string,
): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const info = await lstat(dir);
  const uid = process.getuid?.() ?? 0;
  if (!info.isDirectory() || info.uid !== uid)
    throw refuse(`${what} ${dir} is not a directory of uid ${uid}`);
  if ((info.mode & 0o777) !== 0o700) await chmod(dir, 0o700);
}
