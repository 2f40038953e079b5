import {
  copyFile,
  lstat,
  mkdir,
  readdir,
  readFile,
  rename,
  chown as setOwner,
  stat,
  writeFile,
} from "node:fs/promises";
import { dirname, join } from "node:path";
import { resolveInRoot } from "./root-path.js";

/** The account E2B's SDK runs commands as; Warren's base rootfs has it too. */
export const GUEST_USER = "user";
const HOME = `/home/${GUEST_USER}`;
const FIRST_ID = 1000;

export interface GuestUserResult {
  /** False when the image already had the account (it is then left as it is). */
  readonly added: boolean;
  readonly uid: number;
  readonly gid: number;
  readonly shell: string;
}

export interface EnsureGuestUserOptions {
  /** Give the home directory to the account (needs root; tests run without). */
  readonly setOwners?: boolean;
}

type Row = string[];
const parse = (text: string): Row[] =>
  text
    .split("\n")
    .filter((line) => line.trim() !== "" && !line.startsWith("#"))
    .map((line) => line.split(":"));

/** Reads a file of the image (inside the root), or undefined when it has none. */
async function readImageFile(root: string, path: string): Promise<string | undefined> {
  const host = await resolveInRoot(root, path);
  const st = await lstat(host).catch(() => undefined);
  return st?.isFile() ? readFile(host, "utf8") : undefined;
}

/**
 * Writes a file of the image through a temporary file and a rename, which replaces a symlink
 * at that path rather than writing where it points.
 */
async function writeImageFile(
  root: string,
  path: string,
  text: string,
  mode: number,
): Promise<void> {
  const host = await resolveInRoot(root, path);
  await mkdir(dirname(host), { recursive: true, mode: 0o755 });
  const st = await lstat(host).catch(() => undefined);
  const temp = `${host}.warren-tmp`;
  await writeFile(temp, text, { mode: st?.isFile() ? st.mode & 0o7777 : mode });
  if (st?.isFile()) await setOwner(temp, st.uid, st.gid).catch(() => {});
  await rename(temp, host);
}

const appendLine = (text: string | undefined, line: string): string => {
  const base = text ?? "";
  return `${base}${base === "" || base.endsWith("\n") ? "" : "\n"}${line}\n`;
};

function firstFree(used: Set<number>, preferred: number): number {
  let id = preferred;
  while (used.has(id)) id++;
  return id;
}

/**
 * Adds the `user` account to an unpacked image when it lacks one, by editing /etc/passwd,
 * /etc/group and (when the image has them) /etc/shadow and /etc/gshadow directly: no
 * useradd, whose presence and flags differ between glibc distributions and busybox (Alpine).
 * uid/gid 1000 when free, home /home/user (from /etc/skel's files), bash when the image has
 * it (else sh), no password, and passwordless sudo only when the image has /etc/sudoers.d.
 */
export async function ensureGuestUser(
  root: string,
  options: EnsureGuestUserOptions = {},
): Promise<GuestUserResult> {
  const passwdText = await readImageFile(root, "etc/passwd");
  const passwd = parse(passwdText ?? "");
  const existing = passwd.find((row) => row[0] === GUEST_USER);
  if (existing) {
    return {
      added: false,
      uid: Number(existing[2]),
      gid: Number(existing[3]),
      shell: existing[6] ?? "/bin/sh",
    };
  }
  const groupText = await readImageFile(root, "etc/group");
  const groups = parse(groupText ?? "");
  const uid = firstFree(new Set(passwd.map((row) => Number(row[2]))), FIRST_ID);
  const ownGroup = groups.find((row) => row[0] === GUEST_USER);
  const gid = ownGroup
    ? Number(ownGroup[2])
    : firstFree(new Set(groups.map((row) => Number(row[2]))), uid);
  const shell = (await exists(root, "bin/bash")) ? "/bin/bash" : "/bin/sh";

  const shadow = await readImageFile(root, "etc/shadow");
  // No password, as the base rootfs's `passwd -d`: in /etc/shadow when the image keeps one
  // ("x" here), else an empty field here ("x" without a shadow file would lock the account).
  const password = shadow === undefined ? "" : "x";
  // An image without /etc/passwd (scratch, distroless) gets root too: su and sudo need it.
  let newPasswd = passwdText ?? "root::0:0:root:/root:/bin/sh\n";
  newPasswd = appendLine(newPasswd, `${GUEST_USER}:${password}:${uid}:${gid}::${HOME}:${shell}`);
  await writeImageFile(root, "etc/passwd", newPasswd, 0o644);
  if (!ownGroup) {
    const newGroup = appendLine(groupText ?? "root:x:0:\n", `${GUEST_USER}:x:${gid}:`);
    await writeImageFile(root, "etc/group", newGroup, 0o644);
  }
  if (shadow !== undefined) {
    const days = Math.floor(Date.now() / 86_400_000);
    await writeImageFile(
      root,
      "etc/shadow",
      appendLine(shadow, `${GUEST_USER}::${days}:0:99999:7:::`),
      0o640,
    );
  }
  const gshadow = await readImageFile(root, "etc/gshadow");
  if (gshadow !== undefined && !ownGroup) {
    await writeImageFile(root, "etc/gshadow", appendLine(gshadow, `${GUEST_USER}:!::`), 0o640);
  }
  await makeHome(root, uid, gid, options.setOwners === true);
  const sudoersDir = await resolveInRoot(root, "etc/sudoers.d");
  if ((await stat(sudoersDir).catch(() => undefined))?.isDirectory()) {
    const rule = await resolveInRoot(root, `etc/sudoers.d/${GUEST_USER}`);
    if (!(await lstat(rule).catch(() => undefined))) {
      await writeFile(rule, `${GUEST_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n`, { mode: 0o440 });
    }
  }
  return { added: true, uid, gid, shell };
}

async function exists(root: string, path: string): Promise<boolean> {
  return (await lstat(await resolveInRoot(root, path)).catch(() => undefined)) !== undefined;
}

/** /home/user with /etc/skel's top-level files, unless something is there already. */
async function makeHome(root: string, uid: number, gid: number, setOwners: boolean): Promise<void> {
  const home = await resolveInRoot(root, HOME.slice(1));
  if (await lstat(home).catch(() => undefined)) return;
  await mkdir(dirname(home), { recursive: true, mode: 0o755 });
  await mkdir(home, { mode: 0o750 });
  const skel = await resolveInRoot(root, "etc/skel");
  const names = await readdir(skel).catch(() => [] as string[]);
  for (const name of names) {
    const from = join(skel, name);
    if (!(await lstat(from)).isFile()) continue;
    await copyFile(from, join(home, name));
    if (setOwners) await setOwner(join(home, name), uid, gid);
  }
  if (setOwners) await setOwner(home, uid, gid);
}
