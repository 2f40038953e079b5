import assert from "node:assert/strict";
import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  truncate,
  utimes,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, beforeEach, describe, it } from "node:test";
import { ArtifactBuilds, type ArtifactSpec } from "./artifact-builds.js";
import { CommandRunner } from "./command.js";
import { FileHashCache } from "./file-hash.js";
import { imagesLayout } from "./layout.js";
import { readManifest, writeManifest } from "./manifest.js";

describe("ArtifactBuilds", () => {
  const dirs: string[] = [];
  let dataDir: string;
  let builds: number;

  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "warren-artifact-builds-"));
    dirs.push(dataDir);
    builds = 0;
  });

  /** Artifact builds as a fresh setup run would open them (manifest and hash cache read from disk). */
  async function open(): Promise<ArtifactBuilds> {
    const layout = imagesLayout(dataDir);
    await mkdir(layout.cacheDir, { recursive: true });
    return new ArtifactBuilds(
      layout,
      await readManifest(layout.manifest),
      await FileHashCache.load(layout.hashCache),
      new CommandRunner(),
    );
  }

  function spec(overrides: Partial<ArtifactSpec> = {}): ArtifactSpec {
    return {
      name: "kernel",
      path: imagesLayout(dataDir).kernel,
      recipe: 1,
      inputs: { source: "abc" },
      async build(output) {
        builds++;
        await writeFile(output, `kernel built ${builds}\n`);
        return { n: String(builds) };
      },
      ...overrides,
    };
  }

  it("builds once, then reuses the artifact", async () => {
    const first = await (await open()).ensure(spec());
    assert.equal(first.rebuiltBecause, "not built yet");
    assert.equal(first.record.details.n, "1");
    const second = await (await open()).ensure(spec());
    assert.equal(second.rebuiltBecause, undefined);
    assert.equal(builds, 1);
    assert.equal(await readFile(imagesLayout(dataDir).kernel, "utf8"), "kernel built 1\n");
  });

  it("rebuilds a truncated artifact", async () => {
    await (await open()).ensure(spec());
    await truncate(imagesLayout(dataDir).kernel, 3);
    const again = await (await open()).ensure(spec());
    assert.match(again.rebuiltBecause ?? "", /sha256 mismatch/);
    assert.equal(builds, 2);
  });

  it("rebuilds an artifact changed in place with its size and mtime kept", async () => {
    await (await open()).ensure(spec());
    const path = imagesLayout(dataDir).kernel;
    const before = await stat(path);
    await writeFile(path, "KERNEL BUILT 1\n");
    await utimes(path, before.atime, before.mtime);
    const again = await (await open()).ensure(spec());
    assert.match(again.rebuiltBecause ?? "", /sha256 mismatch/);
  });

  it("rebuilds when the manifest's hash was tampered with", async () => {
    await (await open()).ensure(spec());
    const layout = imagesLayout(dataDir);
    const manifest = await readManifest(layout.manifest);
    const record = manifest.artifacts.kernel;
    assert.ok(record);
    manifest.artifacts.kernel = { ...record, sha256: "0".repeat(64) };
    await writeManifest(layout.manifest, manifest);
    const again = await (await open()).ensure(spec());
    assert.match(again.rebuiltBecause ?? "", /sha256 mismatch/);
  });

  it("rebuilds a missing artifact, a newer recipe and changed inputs", async () => {
    await (await open()).ensure(spec());
    await rm(imagesLayout(dataDir).kernel);
    assert.equal((await (await open()).ensure(spec())).rebuiltBecause, "file missing");
    assert.equal((await (await open()).ensure(spec({ recipe: 2 }))).rebuiltBecause, "recipe 1 → 2");
    const changed = await (await open()).ensure(spec({ recipe: 2, inputs: { source: "def" } }));
    assert.equal(changed.rebuiltBecause, "input changed: source");
    assert.equal(builds, 4);
  });

  it("treats an unreadable manifest as empty", async () => {
    await (await open()).ensure(spec());
    await writeFile(imagesLayout(dataDir).manifest, "{ not json");
    assert.equal((await (await open()).ensure(spec())).rebuiltBecause, "not built yet");
  });

  it("leaves no artifact, record or scratch files when a build fails", async () => {
    const failing = spec({
      async build(output) {
        await writeFile(output, "half");
        throw new Error("interrupted");
      },
    });
    await assert.rejects((await open()).ensure(failing), /interrupted/);
    const layout = imagesLayout(dataDir);
    assert.deepEqual(await readdir(layout.tmpDir), []);
    assert.equal((await readManifest(layout.manifest)).artifacts.kernel, undefined);
    await assert.rejects(readFile(layout.kernel));
  });

  it("keeps the good artifact when its rebuild fails", async () => {
    await (await open()).ensure(spec());
    const failing = spec({
      recipe: 2,
      async build() {
        throw new Error("no network");
      },
    });
    await assert.rejects((await open()).ensure(failing), /no network/);
    assert.equal(await readFile(imagesLayout(dataDir).kernel, "utf8"), "kernel built 1\n");
    assert.equal((await (await open()).ensure(spec())).rebuiltBecause, undefined);
  });
});
