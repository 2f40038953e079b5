import assert from "node:assert/strict";
import { it } from "node:test";
import { ConsoleTail } from "./console.js";

it("keeps only the last bytes of a console that never stops printing", () => {
  const tail = new ConsoleTail(1024);
  for (let i = 0; i < 10_000; i++) tail.append(Buffer.from(`line ${i}\n`));
  const text = tail.text();
  assert.ok(text.length <= 1024, `kept ${text.length} bytes`);
  assert.ok(text.endsWith("line 9999\n"));
  assert.ok(!text.includes("line 1\n"));
});

it("cuts a single chunk larger than the limit to its end", () => {
  const tail = new ConsoleTail(16);
  tail.append(Buffer.from(`${"x".repeat(100)}0123456789abcdef`));
  assert.equal(tail.text(), "0123456789abcdef");
});
