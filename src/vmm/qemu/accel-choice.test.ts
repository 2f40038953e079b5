import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { chooseAccelerator } from "./accel-choice.js";

const dir = mkdtempSync(join(tmpdir(), "warren-accel-"));

describe("chooseAccelerator", () => {
  after(() => rmSync(dir, { recursive: true, force: true }));
  const base = {
    kernel: "/nonexistent/vmlinuz",
    initramfs: "/nonexistent/initrd",
    qemuVersion: "QEMU 7.2",
  };

  it("takes the configured accelerator without probing", async () => {
    const choice = await chooseAccelerator({
      ...base,
      configured: "kvm",
      cacheFile: join(dir, "a.json"),
    });
    assert.deepEqual([choice.accel, choice.source], ["kvm", "config"]);
  });

  it("probes once, then answers from the cache for the same host", async () => {
    const cacheFile = join(dir, "b.json");
    const first = await chooseAccelerator({ ...base, cacheFile });
    assert.equal(first.source, "probe");
    assert.ok(["kvm", "tcg"].includes(first.accel));
    const second = await chooseAccelerator({ ...base, cacheFile });
    assert.deepEqual([second.accel, second.source], [first.accel, "cache"]);
    // A cache written for another host (kernel, QEMU or guest kernel) is not trusted.
    const stale = JSON.parse(readFileSync(cacheFile, "utf8"));
    writeFileSync(cacheFile, JSON.stringify({ ...stale, key: "other-host" }));
    assert.equal((await chooseAccelerator({ ...base, cacheFile })).source, "probe");
  });
});
