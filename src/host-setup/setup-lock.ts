import { link, readFile, unlink, writeFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { isAlive } from "../shared/process-alive.js";

const RETRY_MS = 500;

/**
 * Takes the images directory's setup lock (a file holding the owner's pid), waiting while
 * another live process holds it and taking over one left by a dead process. Returns release.
 */
export async function acquireSetupLock(
  path: string,
  onWait: (pid: number) => void,
): Promise<() => Promise<void>> {
  let announced = false;
  for (;;) {
    // Written aside then linked: the lock never exists without its pid in it.
    const mine = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}`;
    await writeFile(mine, `${process.pid}\n`);
    try {
      await link(mine, path);
      return async () => {
        await unlink(path).catch(() => undefined);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    } finally {
      await unlink(mine).catch(() => undefined);
    }
    const text = await readFile(path, "utf8").catch(() => undefined);
    if (text === undefined) continue; // released meanwhile
    const owner = Number.parseInt(text, 10);
    if (Number.isInteger(owner) && isAlive(owner)) {
      if (!announced) onWait(owner);
      announced = true;
      await sleep(RETRY_MS);
    } else {
      await unlink(path).catch(() => undefined);
    }
  }
}
