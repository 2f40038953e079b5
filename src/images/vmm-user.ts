import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { promisify } from "node:util";
import { WarrenError } from "../shared/index.js";

const run = promisify(execFile);

/** The unprivileged account QEMU drops to once it has opened its devices. */
export const VMM_USER = "warren-vmm";

export interface SystemAccount {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

async function lookup(name: string): Promise<SystemAccount | undefined> {
  const passwd = await readFile("/etc/passwd", "utf8");
  const fields = passwd
    .split("\n")
    .find((line) => line.startsWith(`${name}:`))
    ?.split(":");
  if (!fields) return undefined;
  return { name, uid: Number(fields[2]), gid: Number(fields[3]) };
}

/** Creates the VMM's system account when missing (no home, no shell, no password). */
export async function ensureVmmUser(name = VMM_USER): Promise<SystemAccount> {
  const existing = await lookup(name);
  if (existing) return existing;
  try {
    await run("useradd", [
      "--system",
      "--no-create-home",
      "--shell",
      "/usr/sbin/nologin",
      "--user-group",
      name,
    ]);
  } catch (err) {
    throw new WarrenError(
      "internal",
      `cannot create the VMM account ${name}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const created = await lookup(name);
  if (!created) throw new WarrenError("internal", `account ${name} missing right after useradd`);
  return created;
}
