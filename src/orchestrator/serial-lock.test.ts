import assert from "node:assert/strict";
import { it } from "node:test";
import { SerialLock } from "./serial-lock.js";

it("runs operations on one key one at a time, in order, and keys independently", async () => {
  const lock = new SerialLock();
  const trace: string[] = [];
  const step = (name: string, ms: number) => async () => {
    trace.push(`${name}:start`);
    await new Promise((resolve) => setTimeout(resolve, ms));
    trace.push(`${name}:end`);
    return name;
  };
  const results = await Promise.all([
    lock.run("a", step("a1", 30)),
    lock.run("a", step("a2", 1)),
    lock.run("b", step("b1", 5)),
  ]);
  assert.deepEqual(results, ["a1", "a2", "b1"]);
  assert.ok(trace.indexOf("a1:end") < trace.indexOf("a2:start"), trace.join(" "));
  assert.ok(trace.indexOf("b1:start") < trace.indexOf("a1:end"), "b does not wait for a");
  assert.equal(lock.busy("a"), false);
});

it("a failed operation does not block the next one", async () => {
  const lock = new SerialLock();
  await assert.rejects(
    lock.run("a", async () => Promise.reject(new Error("boom"))),
    /boom/,
  );
  assert.equal(await lock.run("a", async () => 7), 7);
});
