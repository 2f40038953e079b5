import { spawn } from "node:child_process";
import { closeSync, openSync, readSync, writeSync } from "node:fs";
import { open, readFile } from "node:fs/promises";
import { VmmError } from "../errors.js";
import { vmmEnv } from "./qemu-process.js";
import { openPlainFile } from "./sealed-files.js";
export const PAGE_SIZE = 4096;
const DIFF_MAGIC = "WRNMEM01";
/** Pages moved per read/write when copying runs of guest memory. */
const RUN_PAGES = 256;

export interface RamMapping {
  readonly start: number;
  readonly size: number;
}

/**
 * Finds where QEMU mapped the guest-RAM file (by its path) in its address space: the mapping
 * of exactly the guest's RAM size (`ramBytes`). The VMM decides what its address space holds
 * (an escaped one can map the file again, a terabyte long), and the mapping sizes what the
 * capture reads and allocates: any other size is refused.
 */
export async function findRamMapping(
  pid: number,
  memoryFile: string,
  ramBytes: number,
): Promise<RamMapping> {
  const maps = await readFile(`/proc/${pid}/maps`, "utf8");
  const sizes: number[] = [];
  for (const line of maps.split("\n")) {
    if (!line.endsWith(` ${memoryFile}`)) continue;
    const [range] = line.split(" ");
    const [from, to] = (range ?? "").split("-").map((hex) => Number.parseInt(hex, 16));
    if (from === undefined || to === undefined || !(to > from)) continue;
    if (to - from === ramBytes) return { start: from, size: ramBytes };
    sizes.push(to - from);
  }
  throw new VmmError(
    `guest RAM: /proc/${pid}/maps holds no mapping of ${memoryFile} as large as the guest's RAM (${ramBytes} bytes)${sizes.length > 0 ? `, only of ${sizes.join(", ")} bytes` : ""}`,
  );
}

/**
 * Pages of a privately mapped RAM file that differ from the file: present and no longer
 * file-backed (pagemap bit 63 set, bit 61 clear), or swapped out (bit 62). The scan (8
 * bytes per page read, 4 kept) is sized by the mapping: one larger than the guest's RAM
 * (`ramBytes`) is refused before anything is allocated.
 */
export async function dirtyPages(
  pid: number,
  mapping: RamMapping,
  ramBytes: number,
): Promise<Uint32Array> {
  if (mapping.size > ramBytes || mapping.size % PAGE_SIZE !== 0 || mapping.start % PAGE_SIZE !== 0)
    throw new VmmError(
      `guest RAM: a mapping of ${mapping.size} bytes is larger than the guest's RAM (${ramBytes} bytes) or not page-aligned`,
    );
  const pages = mapping.size / PAGE_SIZE;
  const buffer = Buffer.alloc(pages * 8);
  const handle = await open(`/proc/${pid}/pagemap`, "r");
  try {
    let done = 0;
    while (done < buffer.length) {
      const position = (mapping.start / PAGE_SIZE) * 8 + done;
      const { bytesRead } = await handle.read(buffer, done, buffer.length - done, position);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
  } finally {
    await handle.close();
  }
  // Little-endian: the high half of entry i is word 2i+1; bits 63/62/61 are its bits 31/30/29.
  const words = new Uint32Array(buffer.buffer, buffer.byteOffset, pages * 2);
  const dirty = new Uint32Array(pages);
  let count = 0;
  for (let i = 0; i < pages; i++) {
    const high = words[i * 2 + 1] as number;
    // `>>> 0`: bitwise results are signed; compare them as unsigned.
    if ((high & 0xa0000000) >>> 0 === 0x80000000 || (high & 0x40000000) !== 0) dirty[count++] = i;
  }
  return dirty.subarray(0, count);
}

/** Calls `fn(firstPage, count, index)` for each run of consecutive pages (at most RUN_PAGES long). */
function forEachRun(
  pages: Uint32Array,
  fn: (first: number, count: number, index: number) => void,
): void {
  let i = 0;
  while (i < pages.length) {
    const first = pages[i] as number;
    let count = 1;
    while (i + count < pages.length && pages[i + count] === first + count && count < RUN_PAGES)
      count++;
    fn(first, count, i);
    i += count;
  }
}

function diffDataOffset(count: number): number {
  const header = 16 + count * 4;
  return Math.ceil(header / PAGE_SIZE) * PAGE_SIZE;
}

// The two functions below use synchronous I/O on purpose: they run while the guest is
// stopped, one read or write per run of pages, and a thread-pool round trip per call would
// cost more than the copy itself. They move pages through one reused, already-touched
// buffer: on a virtualized host, first touches of fresh memory cost more than the copying.
const CHUNK_BYTES = RUN_PAGES * PAGE_SIZE;
let chunk: Buffer | undefined;

function scratch(): Buffer {
  chunk ??= Buffer.alloc(CHUNK_BYTES);
  return chunk;
}

/**
 * Writes the given guest pages, read from QEMU's memory, as a memory diff: a header with
 * the page numbers, then the pages back to back. The snapshot's full image plus this diff
 * is the guest's RAM; writing only the diff keeps a pause proportional to what changed.
 */
export function writeMemoryDiff(
  pid: number,
  mapping: RamMapping,
  pages: Uint32Array,
  path: string,
): void {
  const dataOffset = diffDataOffset(pages.length);
  const header = Buffer.alloc(dataOffset);
  header.write(DIFF_MAGIC, 0, "ascii");
  header.writeUInt32LE(PAGE_SIZE, 8);
  header.writeUInt32LE(pages.length, 12);
  Buffer.from(pages.buffer, pages.byteOffset, pages.byteLength).copy(header, 16);
  const buffer = scratch();
  const mem = openSync(`/proc/${pid}/mem`, "r");
  const out = openSync(path, "wx", 0o600);
  try {
    writeFully(out, header, 0);
    forEachRun(pages, (first, count, index) => {
      const bytes = count * PAGE_SIZE;
      const read = readSync(mem, buffer, 0, bytes, mapping.start + first * PAGE_SIZE);
      if (read !== bytes) throw new VmmError(`short read of guest memory at page ${first}`);
      writeFully(out, buffer.subarray(0, bytes), dataOffset + index * PAGE_SIZE);
    });
  } finally {
    closeSync(mem);
    closeSync(out);
  }
}

function writeFully(fd: number, data: Buffer, position: number): void {
  let done = 0;
  while (done < data.length) done += writeSync(fd, data, done, data.length - done, position + done);
}

/** Writes a memory diff into a stopped QEMU's guest RAM (copy-on-write of its private mapping). */
export function applyMemoryDiff(pid: number, mapping: RamMapping, path: string): number {
  const diff = openSync(path, "r");
  const mem = openSync(`/proc/${pid}/mem`, "r+");
  try {
    const head = Buffer.alloc(16);
    readSync(diff, head, 0, 16, 0);
    if (head.toString("ascii", 0, 8) !== DIFF_MAGIC || head.readUInt32LE(8) !== PAGE_SIZE) {
      throw new VmmError(`${path} is not a memory diff`);
    }
    const count = head.readUInt32LE(12);
    if (count > mapping.size / PAGE_SIZE)
      throw new VmmError(`${path} holds more pages than guest RAM`);
    const index = Buffer.alloc(count * 4);
    if (readSync(diff, index, 0, index.length, 16) !== index.length)
      throw new VmmError(`${path} is truncated`);
    const pages = new Uint32Array(index.buffer, index.byteOffset, count);
    const dataOffset = diffDataOffset(count);
    const buffer = scratch();
    forEachRun(pages, (first, run, at) => {
      const bytes = run * PAGE_SIZE;
      if (first * PAGE_SIZE + bytes > mapping.size)
        throw new VmmError(`${path} has pages beyond guest RAM`);
      if (readSync(diff, buffer, 0, bytes, dataOffset + at * PAGE_SIZE) !== bytes) {
        throw new VmmError(`${path} is truncated`);
      }
      writeSync(mem, buffer, 0, bytes, mapping.start + first * PAGE_SIZE);
    });
    return count;
  } finally {
    closeSync(diff);
    closeSync(mem);
  }
}

/**
 * Copies a (sparse) memory image, keeping holes; reflinks where the filesystem can. `from`
 * is in a VMM's directory, where the VMM may have put anything by that name: it is opened
 * without following a link and without waiting (a FIFO would block the open for ever),
 * must be a plain file, and `cp` copies what that descriptor holds.
 */
export async function copySparse(from: string, to: string): Promise<void> {
  const source = await openPlainFile(from);
  try {
    await new Promise<void>((resolve, reject) => {
      const args = ["--sparse=always", "--reflink=auto", "/dev/fd/3", to];
      const child = spawn("cp", args, {
        stdio: ["ignore", "ignore", "pipe", source.fd],
        env: vmmEnv(),
      });
      let stderr = "";
      child.stderr?.setEncoding("utf8").on("data", (text: string) => {
        stderr = (stderr + text).slice(-2_000);
      });
      child.once("error", reject);
      child.once("exit", (code) =>
        code === 0 ? resolve() : reject(new Error(stderr.trim() || `cp exited with ${code}`)),
      );
    });
  } catch (err) {
    throw new VmmError(`cannot copy memory image ${from}: ${(err as Error).message}`, undefined, {
      cause: err,
    });
  } finally {
    await source.close();
  }
}
