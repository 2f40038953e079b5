import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type ArtifactRecord,
  defaultImagesDir,
  ensureHostSetup,
  imagesLayout,
  readManifest,
} from "../../../src/host-setup/index.js";
import { writeManifest } from "../../../src/host-setup/manifest.js";

/**
 * Stale and corrupted artifacts are rebuilt, not trusted. Uses a temporary data directory and
 * only the agent drive (a couple of seconds to build); the manifest logic itself is unit-tested
 * in src/host-setup/artifact-builds.test.ts.
 */
describe("ensureHostSetup rebuilds what it cannot trust", () => {
  let dataDir: string;
  const imagesDir = () => defaultImagesDir(dataDir);
  const lines: string[] = [];
  const setup = () =>
    ensureHostSetup({
      dataDir,
      only: ["agent-drive"],
      installPackages: false,
      progress: { write: (text: string) => lines.push(text) },
    });
  const record = async (): Promise<ArtifactRecord> => {
    const found = (await readManifest(imagesLayout(imagesDir()).manifest)).artifacts["agent-drive"];
    assert.ok(found, "agent-drive is recorded");
    return found;
  };

  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "warren-setup-"));
  });
  after(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  it("builds the agent drive, then keeps it", async () => {
    await setup();
    const first = await record();
    lines.length = 0;
    await setup();
    assert.deepEqual(await record(), first);
    assert.ok(
      lines.some((line) => line.includes("agent.ext4 up to date")),
      lines.join(""),
    );
    assert.ok(
      lines.some((line) => line.includes("kernel: skipped")),
      lines.join(""),
    );
  });

  it("rebuilds a truncated drive", async () => {
    const before = await record();
    await truncate(imagesLayout(imagesDir()).agentDrive, 4096);
    lines.length = 0;
    await setup();
    const after = await record();
    assert.notEqual(after.builtAt, before.builtAt);
    assert.ok(
      lines.some((line) => line.includes("sha256 mismatch")),
      lines.join(""),
    );
  });

  it("rebuilds when the manifest's recipe is older or its hash was tampered with", async () => {
    const layout = imagesLayout(imagesDir());
    for (const tamper of [
      (r: ArtifactRecord) => ({ ...r, recipe: r.recipe - 1 }),
      (r: ArtifactRecord) => ({ ...r, sha256: "f".repeat(64) }),
    ]) {
      const manifest = await readManifest(layout.manifest);
      const before = await record();
      manifest.artifacts["agent-drive"] = tamper(before);
      await writeManifest(layout.manifest, manifest);
      await setup();
      assert.notEqual((await record()).builtAt, before.builtAt);
    }
  });

  it("records what the drive holds and leaves no scratch files", async () => {
    const drive = await record();
    for (const input of ["bin/node", "bin/busybox", "bin/tini", "envd/envd.mjs", "init"])
      assert.match(drive.inputs[input] ?? "", /^[0-9a-f]{64}$/, input);
    assert.ok(drive.inputs["lib/ld-linux-x86-64.so.2"]);
    assert.ok(drive.inputs["envd/build/Release/pty.node"]);
    assert.match(drive.details.envdVersion ?? "", /^\d+\.\d+\.\d+$/);
    const names = await readdir(imagesLayout(imagesDir()).dir);
    assert.ok(!names.includes(".tmp") && !names.includes(".setup.lock"), names.join(" "));
    assert.match(await readFile(imagesLayout(imagesDir()).log, "utf8"), /mkfs\.ext4|ldd/);
  });
});
