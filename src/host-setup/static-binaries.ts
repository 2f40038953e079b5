import { open } from "node:fs/promises";
import { WarrenError } from "../shared/index.js";

/** busybox from Debian's busybox-static package. */
export const BUSYBOX_STATIC = "/bin/busybox";
/** tini from Debian's tini package (it also ships a dynamic /usr/bin/tini). */
export const TINI_STATIC = "/usr/bin/tini-static";

const PT_INTERP = 3;

/**
 * The program interpreter (dynamic loader) an x86-64 ELF file asks for, or undefined for a
 * static binary. Reads the program headers directly: no ldd, no process.
 */
export async function elfInterpreter(path: string): Promise<string | undefined> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(64);
    await file.read(head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1)
      throw new WarrenError("invalid_argument", `${path} is not a 64-bit little-endian ELF file`);
    const phoff = Number(head.readBigUInt64LE(0x20));
    const phentsize = head.readUInt16LE(0x36);
    const phnum = head.readUInt16LE(0x38);
    const table = Buffer.alloc(phentsize * phnum);
    await file.read(table, 0, table.length, phoff);
    for (let i = 0; i < phnum; i++) {
      const entry = i * phentsize;
      if (table.readUInt32LE(entry) !== PT_INTERP) continue;
      const offset = Number(table.readBigUInt64LE(entry + 8));
      const size = Number(table.readBigUInt64LE(entry + 0x20));
      const name = Buffer.alloc(size);
      await file.read(name, 0, size, offset);
      return name.toString("latin1").replace(/\0.*$/s, "");
    }
    return undefined;
  } finally {
    await file.close();
  }
}

/** Checks that `path` exists and needs no shared library (it runs in any guest). */
export async function assertStatic(path: string, packageName: string): Promise<void> {
  let interpreter: string | undefined;
  try {
    interpreter = await elfInterpreter(path);
  } catch (err) {
    throw new WarrenError(
      "unavailable",
      `${path} is unusable (${(err as Error).message}): install the Debian package ${packageName}`,
      { cause: err },
    );
  }
  if (interpreter)
    throw new WarrenError(
      "unavailable",
      `${path} is not a static binary (it needs ${interpreter}): install the Debian package ${packageName}`,
    );
}
