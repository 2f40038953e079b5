import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { acquireSetupLock } from "./setup-lock.js";

describe("setup lock", async () => {
  const dir = await mkdtemp(join(tmpdir(), "warren-lock-"));
  after(() => rm(dir, { recursive: true, force: true }));

  it("makes a second holder wait for the first", async () => {
    const path = join(dir, "a.lock");
    const release = await acquireSetupLock(path, () => assert.fail("should not wait"));
    assert.equal((await readFile(path, "utf8")).trim(), String(process.pid));
    const order: string[] = [];
    let waited = false;
    const second = acquireSetupLock(path, () => {
      waited = true;
    }).then((release2) => {
      order.push("second");
      return release2;
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    order.push("first released");
    await release();
    await (await second)();
    assert.ok(waited);
    assert.deepEqual(order, ["first released", "second"]);
  });

  it("takes over a lock left by a dead process", async () => {
    const path = join(dir, "b.lock");
    await writeFile(path, "999999999\n");
    const release = await acquireSetupLock(path, () => assert.fail("should not wait"));
    assert.equal((await readFile(path, "utf8")).trim(), String(process.pid));
    await release();
  });
});
