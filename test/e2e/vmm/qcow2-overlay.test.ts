import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { createOverlay, virtualSize } from "../../../src/vmm/qemu/qcow2-overlay.js";

const dir = mkdtempSync(join(tmpdir(), "warren-qcow2-"));

function info(path: string): Record<string, unknown> {
  return JSON.parse(
    execFileSync("qemu-img", ["info", "--output=json", path], { encoding: "utf8" }),
  );
}

function emptyFile(path: string, size: number): void {
  writeFileSync(path, "");
  truncateSync(path, size);
}

describe("createOverlay (checked by qemu-img)", () => {
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("writes an overlay on a raw image that qemu-img accepts and reads through", async () => {
    const base = join(dir, "base.raw");
    writeFileSync(base, Buffer.alloc(1 << 20, 0x5a));
    truncateSync(base, 3 * 1024 ** 3 + 12345 * 512);
    const overlay = join(dir, "a.qcow2");
    await createOverlay(overlay, base, "raw");
    execFileSync("qemu-img", ["check", "-q", overlay]);
    const meta = info(overlay);
    assert.equal(meta.format, "qcow2");
    assert.equal(meta["virtual-size"], 3 * 1024 ** 3 + 12345 * 512);
    assert.equal(meta["backing-filename"], base);
    assert.equal(meta["backing-filename-format"], "raw");
    // Data comes from the backing file until the overlay is written.
    const out = join(dir, "a.out");
    execFileSync("qemu-img", [
      "dd",
      "-f",
      "qcow2",
      "-O",
      "raw",
      `if=${overlay}`,
      `of=${out}`,
      "bs=4096",
      "count=1",
    ]);
    assert.equal(execFileSync("head", ["-c", "4", out], { encoding: "latin1" }), "ZZZZ");
  });

  it("chains on a qcow2 overlay and takes writes", async () => {
    const base = join(dir, "chain-base.raw");
    emptyFile(base, 64 * 1024 ** 2);
    const first = join(dir, "first.qcow2");
    const second = join(dir, "second.qcow2");
    await createOverlay(first, base, "raw");
    await createOverlay(second, first, "qcow2");
    assert.equal(await virtualSize(second), 64n * 1024n ** 2n);
    execFileSync("qemu-io", ["-c", "write -P 7 0 64k", second], { stdio: "ignore" });
    execFileSync("qemu-img", ["check", "-q", second]);
    const chain = JSON.parse(
      execFileSync("qemu-img", ["info", "--backing-chain", "--output=json", second], {
        encoding: "utf8",
      }),
    ) as unknown[];
    assert.equal(chain.length, 3);
  });

  it("grows past its backing image when asked, never below it", async () => {
    const base = join(dir, "grow-base.raw");
    emptyFile(base, 64 * 1024 ** 2);
    assert.equal(
      await createOverlay(join(dir, "grown.qcow2"), base, "raw", {
        minSizeBytes: 256n * 1024n ** 2n,
      }),
      256n * 1024n ** 2n,
    );
    assert.equal(info(join(dir, "grown.qcow2"))["virtual-size"], 256 * 1024 ** 2);
    execFileSync("qemu-img", ["check", "-q", join(dir, "grown.qcow2")]);
    assert.equal(
      await createOverlay(join(dir, "same.qcow2"), base, "raw", { minSizeBytes: 1n }),
      64n * 1024n ** 2n,
    );
  });

  it("refuses to overwrite an existing file", async () => {
    const base = join(dir, "b.raw");
    emptyFile(base, 1 << 20);
    const overlay = join(dir, "exists.qcow2");
    writeFileSync(overlay, "keep");
    await assert.rejects(createOverlay(overlay, base, "raw"), /EEXIST/);
  });
});
