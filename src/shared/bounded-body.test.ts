import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { it } from "node:test";
import { readBounded } from "./bounded-body.js";

const tooLarge = () => new Error("too large");

/** A stream of `n` chunks of 10 bytes, counting how many were read. */
function chunks(n: number): { stream: Readable; read: () => number } {
  let read = 0;
  const stream = Readable.from(
    (function* () {
      for (let i = 0; i < n; i++) {
        read++;
        yield Buffer.alloc(10, i);
      }
    })(),
  );
  return { stream, read: () => read };
}

it("reads a body within the bound whole", async () => {
  const { stream } = chunks(3);
  assert.equal((await readBounded(stream, 30, { tooLarge })).length, 30);
});

it("stops at the first chunk past the bound, destroying the stream", async () => {
  const { stream, read } = chunks(100);
  await assert.rejects(readBounded(stream, 25, { tooLarge }), /too large/);
  assert.ok(read() < 100, `read ${read()} chunks`);
  assert.ok(stream.destroyed);
});

it("with drain, reads the rest unkept, then refuses", async () => {
  const { stream, read } = chunks(100);
  await assert.rejects(readBounded(stream, 25, { tooLarge, drain: true }), /too large/);
  assert.equal(read(), 100);
});
