/**
 * Looking at a VMM process from outside, and acting as its uid: what the containment tests
 * check and what an escaped VMM could do with its own uid.
 */
import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readdir, readFile, readlink, stat, utimes } from "node:fs/promises";
import { promisify } from "node:util";

const execFileP = promisify(execFile);
const O_ACCMODE = 0o3;
/** The system's Python, which any uid may run (a PATH may lead to root's own first). */
export const PYTHON = "/usr/bin/python3";

/** The uid lines of /proc/<pid>/status: real, effective, saved, filesystem. */
export async function uidsOf(pid: number): Promise<number[]> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return (/^Uid:\s+(.*)$/m.exec(status)?.[1] ?? "").split(/\s+/).map(Number);
}

/** Access modes (O_RDONLY 0, O_RDWR 2) of a process's descriptors on files ending in `suffix`. */
export async function accessModes(pid: number, suffix: string): Promise<number[]> {
  const modes: number[] = [];
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "");
    if (!target.endsWith(suffix)) continue;
    const info = await readFile(`/proc/${pid}/fdinfo/${fd}`, "utf8");
    modes.push(Number.parseInt(/^flags:\s+(\d+)/m.exec(info)?.[1] ?? "0", 8) & O_ACCMODE);
  }
  return modes;
}

const asUid = (uid: number) => [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--"];

/** Runs a command as `uid` (a stand-in for code an escaped VMM runs); its exit code. */
export async function runAs(uid: number, command: string[]): Promise<number> {
  return execFileP("setpriv", [...asUid(uid), ...command]).then(
    () => 0,
    (err: { code?: number }) => err.code ?? 1,
  );
}

/** Writes `bytes` at `offset` of `path` as `uid` (without creating or truncating it). */
export function writeAs(uid: number, path: string, offset: number, bytes: Buffer): Promise<number> {
  const script = `import os, sys
data = sys.stdin.buffer.read()
fd = os.open(sys.argv[1], os.O_WRONLY)
os.pwrite(fd, data, int(sys.argv[2]))
os.close(fd)`;
  const child = spawn("setpriv", [...asUid(uid), PYTHON, "-c", script, path, String(offset)], {
    stdio: ["pipe", "ignore", "inherit"],
  });
  child.stdin.end(bytes);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code ?? 1)));
}

/** Sets a file's access and modification times to the past (see fileState). */
export async function ageFile(path: string): Promise<void> {
  const past = new Date("2000-01-01T00:00:00Z");
  await utimes(path, past, past);
}

/**
 * What shows that a file was read or written: its content, size, modification and access
 * times. Call `ageFile` first: with its access time in the past, any read moves it (relatime).
 */
export async function fileState(path: string): Promise<Record<string, string | number>> {
  const s = await stat(path);
  const sha256 = createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
  // Hashing read it: put the times back as they were.
  await utimes(path, s.atime, s.mtime);
  return { sha256, size: s.size, mtimeMs: s.mtimeMs, atimeMs: s.atimeMs };
}
