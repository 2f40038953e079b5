import { chown, mkdir } from "node:fs/promises";
import { dirname, relative, sep } from "node:path";
import type { UserAccount } from "./users.js";

/** mkdir -p, handing every directory it creates to `user` (the agent itself runs as root). */
export async function makeOwnedDirs(path: string, user: UserAccount): Promise<void> {
  const first = await mkdir(path, { recursive: true });
  if (first === undefined) return;
  let current = first;
  const rest = relative(first, path).split(sep).filter(Boolean);
  await chown(current, user.uid, user.gid);
  for (const part of rest) {
    current = `${current}${sep}${part}`;
    await chown(current, user.uid, user.gid);
  }
}

export async function makeOwnedParentDirs(path: string, user: UserAccount): Promise<void> {
  await makeOwnedDirs(dirname(path), user);
}
