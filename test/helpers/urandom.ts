import assert from "node:assert/strict";

const READS = 512;

/**
 * A guest command: 512 reads of 32 bytes of /dev/urandom from one process, one hex line
 * each. Each such read is one step of the kernel's fast-key-erasure chain, so two guests on
 * the same CRNG key read the same blocks, shifted by however many draws each made before
 * (their own execs, sockets): one read apiece can differ and still come from one stream.
 * Compare the sets (`sharedBlocks`), not single reads.
 */
export const URANDOM_BLOCKS = `python3 -c 'import os
f = os.open("/dev/urandom", os.O_RDONLY)
print("\\n".join(os.read(f, 32).hex() for _ in range(${READS})))'`;

/** The blocks a run of URANDOM_BLOCKS printed. */
export function urandomBlocks(stdout: string): Set<string> {
  const lines = stdout.trim().split("\n");
  assert.equal(lines.length, READS);
  for (const line of lines) assert.match(line, /^[0-9a-f]{64}$/);
  return new Set(lines);
}

/** How many blocks two reads have in common (0 for independent CRNGs, all but chance). */
export function sharedBlocks(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  return [...a].filter((block) => b.has(block)).length;
}
