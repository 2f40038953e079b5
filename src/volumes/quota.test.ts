import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, describe, it } from "node:test";
import { diskUsage, VolumeQuota } from "./quota.js";
import { VolumeFiles } from "./volume-files.js";

describe("volume quota", () => {
  const dir = mkdtempSync(join(tmpdir(), "warren-volume-quota-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("du counts disk blocks of every volume of the team", async () => {
    const a = mkdtempSync(join(dir, "a-"));
    const b = mkdtempSync(join(dir, "b-"));
    const empty = await diskUsage([a, b]);
    writeFileSync(join(a, "f"), Buffer.alloc(256 * 1024, 1));
    writeFileSync(join(b, "g"), Buffer.alloc(128 * 1024, 1));
    const used = await diskUsage([a, b]);
    assert.ok(used - empty >= 384 * 1024, `${used} - ${empty}`);
  });

  it("refuses past the limit, counts what it admits, and admits again once files go", async () => {
    const root = mkdtempSync(join(dir, "vol-"));
    let limit: number | undefined = 1024 * 1024;
    const quota = new VolumeQuota({
      limitOf: async () => limit,
      rootsOf: async () => [root],
      remeasureMs: 0, // every check measures again
    });
    const files = new VolumeFiles(root, { admit: (bytes) => quota.admit("team", bytes) });
    await quota.check("team", 0);
    await files.write("/a", Readable.from([Buffer.alloc(600 * 1024, 1)]), {});
    // Counted since the measure: the second 600 KiB would pass the limit.
    await assert.rejects(
      files.write("/b", Readable.from([Buffer.alloc(600 * 1024, 1)]), {}),
      (err: { reason?: string; message: string }) =>
        err.reason === "quota_exceeded" && /quota of volume bytes/.test(err.message),
    );
    await assert.rejects(quota.check("team", 600 * 1024), /quota of volume bytes/);
    await files.remove("/a");
    await files.remove("/b").catch(() => {});
    await quota.check("team", 600 * 1024);
    // No limit: anything goes.
    limit = undefined;
    await quota.check("team", 0);
    assert.equal(quota.admit("team", 10 * 1024 * 1024 * 1024), true);
  });
});
