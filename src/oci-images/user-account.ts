import { randomBytes } from "node:crypto";
import { type FileHandle, mkdir, open, rename, rm } from "node:fs/promises";
import { WarrenError } from "../shared/index.js";
import {
  type ImageDir,
  ImageTree,
  lstatEntry,
  OPEN_DIRECTORY,
  OPEN_NEW,
  readRegularFile,
} from "./image-tree.js";

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

/** Account files and /etc/skel's files are small; anything bigger is not one. */
const MAX_FILE_BYTES = 16 * 1024 * 1024;

/** Reads a regular file of the image, or undefined when it has none (or not a file). */
async function readImageFile(tree: ImageTree, path: string): Promise<string | undefined> {
  const entry = await tree.entry(path);
  if (!entry) return undefined;
  try {
    return (await readRegularFile(entry.at, MAX_FILE_BYTES))?.bytes.toString("utf8");
  } finally {
    await entry.dir.close();
  }
}

/**
 * Writes a file of the image through a fresh temporary file (a random name, O_EXCL and
 * O_NOFOLLOW: never a file or link the image planted) renamed over it, which replaces a
 * symlink at that path rather than writing where it points. Owner and mode are set through
 * the new file's handle.
 */
async function writeImageFile(
  tree: ImageTree,
  path: string,
  text: string,
  mode: number,
): Promise<void> {
  const entry = await tree.entry(path, { create: true });
  if (!entry) throw new WarrenError("image_invalid", `cannot write the image's root as ${path}`);
  const { dir, name } = entry;
  try {
    const st = await lstatEntry(entry.at);
    const temp = dir.at(`.${name}.warren-${randomBytes(8).toString("hex")}`);
    const handle = await open(temp, OPEN_NEW, 0o600);
    try {
      await handle.writeFile(text);
      if (st?.isFile()) await handle.chown(st.uid, st.gid).catch(() => {});
      await handle.chmod(st?.isFile() ? st.mode & 0o7777 : mode);
      await handle.close();
      await rename(temp, entry.at);
    } catch (err) {
      await handle.close().catch(() => {});
      await rm(temp, { force: true });
      throw err;
    }
  } finally {
    await dir.close();
  }
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
  const tree = await ImageTree.open(root);
  try {
    return await ensureIn(tree, options);
  } finally {
    await tree.close();
  }
}

async function ensureIn(
  tree: ImageTree,
  options: EnsureGuestUserOptions,
): Promise<GuestUserResult> {
  const passwdText = await readImageFile(tree, "etc/passwd");
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
  const groupText = await readImageFile(tree, "etc/group");
  const groups = parse(groupText ?? "");
  const uid = firstFree(new Set(passwd.map((row) => Number(row[2]))), FIRST_ID);
  const ownGroup = groups.find((row) => row[0] === GUEST_USER);
  const gid = ownGroup
    ? Number(ownGroup[2])
    : firstFree(new Set(groups.map((row) => Number(row[2]))), uid);
  const shell = (await exists(tree, "bin/bash")) ? "/bin/bash" : "/bin/sh";

  const shadow = await readImageFile(tree, "etc/shadow");
  // No password, as the base rootfs's `passwd -d`: in /etc/shadow when the image keeps one
  // ("x" here), else an empty field here ("x" without a shadow file would lock the account).
  const password = shadow === undefined ? "" : "x";
  // An image without /etc/passwd (scratch, distroless) gets root too: su and sudo need it.
  let newPasswd = passwdText ?? "root::0:0:root:/root:/bin/sh\n";
  newPasswd = appendLine(newPasswd, `${GUEST_USER}:${password}:${uid}:${gid}::${HOME}:${shell}`);
  await writeImageFile(tree, "etc/passwd", newPasswd, 0o644);
  if (!ownGroup) {
    const newGroup = appendLine(groupText ?? "root:x:0:\n", `${GUEST_USER}:x:${gid}:`);
    await writeImageFile(tree, "etc/group", newGroup, 0o644);
  }
  if (shadow !== undefined) {
    const days = Math.floor(Date.now() / 86_400_000);
    await writeImageFile(
      tree,
      "etc/shadow",
      appendLine(shadow, `${GUEST_USER}::${days}:0:99999:7:::`),
      0o640,
    );
  }
  const gshadow = await readImageFile(tree, "etc/gshadow");
  if (gshadow !== undefined && !ownGroup) {
    await writeImageFile(tree, "etc/gshadow", appendLine(gshadow, `${GUEST_USER}:!::`), 0o640);
  }
  await makeHome(tree, uid, gid, options.setOwners === true);
  await addSudoRule(tree);
  return { added: true, uid, gid, shell };
}

async function exists(tree: ImageTree, path: string): Promise<boolean> {
  const entry = await tree.entry(path);
  if (!entry) return false;
  try {
    return (await lstatEntry(entry.at)) !== undefined;
  } finally {
    await entry.dir.close();
  }
}

/** A NOPASSWD rule in /etc/sudoers.d, when the image has that directory and no rule there. */
async function addSudoRule(tree: ImageTree): Promise<void> {
  const entry = await tree.entry(`etc/sudoers.d/${GUEST_USER}`);
  if (!entry) return;
  try {
    if (await lstatEntry(entry.at)) return;
    const handle = await open(entry.at, OPEN_NEW, 0o400);
    try {
      await handle.writeFile(`${GUEST_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n`);
      await handle.chmod(0o440);
    } finally {
      await handle.close();
    }
  } finally {
    await entry.dir.close();
  }
}

/** /home/user with /etc/skel's top-level regular files, unless something is there already. */
async function makeHome(
  tree: ImageTree,
  uid: number,
  gid: number,
  setOwners: boolean,
): Promise<void> {
  const entry = await tree.entry(HOME, { create: true });
  if (!entry) return;
  let home: FileHandle;
  try {
    if (await lstatEntry(entry.at)) return;
    await mkdir(entry.at, { mode: 0o750 });
    home = await open(entry.at, OPEN_DIRECTORY);
  } finally {
    await entry.dir.close();
  }
  const skel = await tree.directory("etc/skel").catch(async (err: unknown) => {
    await home.close();
    throw err;
  });
  try {
    await home.chmod(0o750);
    if (setOwners) await home.chown(uid, gid);
    if (skel) await copySkel(skel, `/proc/self/fd/${home.fd}`, setOwners ? [uid, gid] : undefined);
  } finally {
    await skel?.close();
    await home.close();
  }
}

/** Copies a directory's regular files (not links, not subdirectories) into `homeAt`. */
async function copySkel(
  skel: ImageDir,
  homeAt: string,
  owner: readonly [number, number] | undefined,
): Promise<void> {
  for (const name of await skel.list()) {
    const file = await readRegularFile(skel.at(name), MAX_FILE_BYTES);
    if (file === undefined) continue;
    const handle = await open(`${homeAt}/${name}`, OPEN_NEW, 0o600);
    try {
      await handle.writeFile(file.bytes);
      await handle.chmod(file.mode & 0o777);
      if (owner) await handle.chown(owner[0], owner[1]);
    } finally {
      await handle.close();
    }
  }
}
