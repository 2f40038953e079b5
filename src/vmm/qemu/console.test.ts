import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConsoleTail, GuestConsole } from "./console.js";

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

describe("GuestConsole", () => {
  /** A QMP stand-in whose ring holds `ring`, emptied by each read, as QEMU's ringbuf-read. */
  const qmpWith = () => {
    const state = { ring: Buffer.alloc(0), reads: 0, fail: false };
    const execute = async <T>(command: string, args?: Record<string, unknown>): Promise<T> => {
      assert.equal(command, "ringbuf-read");
      assert.deepEqual(args, { device: "console", size: 65536, format: "base64" });
      state.reads += 1;
      await new Promise((resolve) => setImmediate(resolve));
      if (state.fail) throw new Error("QMP connection closed");
      const data = state.ring.toString("base64");
      state.ring = Buffer.alloc(0);
      return data as T;
    };
    return { state, qmp: { execute } };
  };

  it("drains the ring into its tail when asked, bytes as the guest wrote them", async () => {
    const { state, qmp } = qmpWith();
    const console = new GuestConsole(qmp, { everyMs: 60_000 });
    state.ring = Buffer.from("boot ✓\n");
    assert.equal(await console.text(), "boot ✓\n");
    state.ring = Buffer.from("login:");
    assert.equal(await console.text(), "boot ✓\nlogin:");
    console.stop();
  });

  it("shares one read among concurrent calls, and keeps its tail when QEMU is gone", async () => {
    const { state, qmp } = qmpWith();
    const console = new GuestConsole(qmp, { everyMs: 60_000 });
    state.ring = Buffer.from("once\n");
    const texts = await Promise.all([console.text(), console.text(), console.drain()]);
    assert.deepEqual(texts.slice(0, 2), ["once\n", "once\n"]);
    assert.equal(state.reads, 1);
    state.fail = true;
    assert.equal(await console.text(), "once\n");
    assert.equal(console.lastText(), "once\n");
    console.stop();
  });

  it("drains on its own every few seconds, and bounds whatever the VMM answers", async () => {
    const { state, qmp } = qmpWith();
    const console = new GuestConsole(qmp, { everyMs: 5, limitBytes: 16 });
    state.ring = Buffer.from(`${"x".repeat(1000)}the-end`);
    for (let i = 0; i < 100 && state.reads === 0; i++) await new Promise((r) => setTimeout(r, 5));
    console.stop();
    await console.drain();
    assert.equal(console.lastText(), `${"x".repeat(9)}the-end`);
  });
});
