import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  applyVolumeMounts,
  guestMounter,
  nfsOptions,
  parseVolumeMounts,
  type VolumeMount,
} from "./volume-mounts.js";

describe("volume mounts (/init)", () => {
  it("parses E2B's shape into server, export and a normalized path", () => {
    assert.equal(parseVolumeMounts(undefined), undefined);
    assert.deepEqual(
      parseVolumeMounts([{ nfs_target: "169.254.0.22:/3f2a-b", path: "/mnt//data/" }]),
      [{ server: "169.254.0.22", exportPath: "/3f2a-b", path: "/mnt/data" }],
    );
  });

  it("refuses what it could not mount safely, naming the entry", () => {
    const bad: [unknown, RegExp][] = [
      [{}, /must be an array/],
      [[{ nfs_target: "host:/x", path: "/a" }], /\[0\]\.nfs_target/],
      [[{ nfs_target: "169.254.0.22:/x,ro", path: "/a" }], /nfs_target/],
      [[{ nfs_target: "169.254.0.22:/../etc", path: "/a" }], /nfs_target/],
      [[{ nfs_target: "169.254.0.22:/x", path: "relative" }], /\[0\]\.path must be an absolute/],
      [[{ nfs_target: "169.254.0.22:/x", path: "/a\0b" }], /path/],
      [[{ nfs_target: "169.254.0.22:/x", path: "/" }], /cannot be \//],
      [
        [
          { nfs_target: "169.254.0.22:/x", path: "/a" },
          { nfs_target: "169.254.0.22:/y", path: "/a/" },
        ],
        /a path twice/,
      ],
      [
        Array.from({ length: 33 }, (_, i) => ({ nfs_target: "1.2.3.4:/x", path: `/m${i}` })),
        /at most 32/,
      ],
    ];
    for (const [value, message] of bad) assert.throws(() => parseVolumeMounts(value), message);
  });

  it("mounts only what is not mounted yet (a resumed guest keeps its mounts)", async () => {
    const asked: VolumeMount[] = [];
    const mounts = parseVolumeMounts([
      { nfs_target: "169.254.0.22:/a", path: "/proc" },
      { nfs_target: "169.254.0.22:/b", path: "/mnt/b" },
    ]) as VolumeMount[];
    // /proc is mounted, but not as NFS: mounted again (a real guest never asks this).
    const added = await applyVolumeMounts(mounts, async (m) => {
      asked.push(m);
    });
    assert.equal(added, 2);
    assert.deepEqual(
      asked.map((m) => m.path),
      ["/proc", "/mnt/b"],
    );
  });

  it("asks for NFSv3 over TCP on the gateway's port, hard, without a portmapper or locks", () => {
    const options = nfsOptions("169.254.0.22").split(",");
    for (const o of [
      "vers=3",
      "proto=tcp",
      "port=2049",
      "mountport=2049",
      "mountproto=tcp",
      "nolock",
      "hard",
    ])
      assert.ok(options.includes(o), o);
    assert.ok(options.includes("addr=169.254.0.22") && options.includes("mountaddr=169.254.0.22"));
  });

  it("mounts with MS_NOSUID | MS_NODEV: a set-uid file or a device node in a volume is inert", async () => {
    const base = mkdtempSync(join(tmpdir(), "warren-volume-mount-"));
    try {
      const calls: unknown[][] = [];
      const mount = guestMounter(async (...args) => {
        calls.push(args);
      });
      const path = join(base, "mnt", "data");
      await mount({ server: "169.254.0.22", exportPath: "/vol", path });
      assert.ok(statSync(path).isDirectory(), "the mount point is made");
      const [source, target, fstype, options, flags] = calls[0] ?? [];
      assert.deepEqual(
        [source, target, fstype, options],
        ["169.254.0.22:/vol", path, "nfs", nfsOptions("169.254.0.22")],
      );
      const MS_NOSUID = 0x2;
      const MS_NODEV = 0x4;
      assert.equal(flags, MS_NOSUID | MS_NODEV);
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
});
