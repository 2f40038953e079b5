import { mkdir, mkdtemp, rename, stat } from "node:fs/promises";
import { basename, join, relative } from "node:path";
import type { CommandRunner } from "./command.js";
import type { FileHashCache } from "./file-hash.js";
import type { ImagesLayout } from "./layout.js";
import {
  type ArtifactName,
  type ArtifactRecord,
  type Manifest,
  recordStaleReason,
  writeManifest,
} from "./manifest.js";

/** How to build one artifact, and from what. */
export interface ArtifactSpec {
  readonly name: ArtifactName;
  /** Final absolute path (inside the images directory). */
  readonly path: string;
  /** Bump when the recipe changes: every artifact built by an older one is rebuilt. */
  readonly recipe: number;
  /** sha256 or exact value of everything the output depends on. */
  readonly inputs: Readonly<Record<string, string>>;
  /**
   * Writes the artifact to `output`, a path in `workDir` (a fresh scratch directory on the same
   * filesystem, removed afterwards). Returns facts to record in the manifest.
   */
  build(output: string, workDir: string): Promise<Record<string, string> | undefined>;
}

export interface EnsureResult {
  readonly record: ArtifactRecord;
  /** Why it was rebuilt, or undefined when the existing one was kept. */
  readonly rebuiltBecause: string | undefined;
}

/**
 * The artifacts of one images directory and their manifest. An artifact is reused only when
 * its record matches the recipe and inputs and the file on disk still has the recorded sha256;
 * otherwise it is built in a scratch directory and renamed into place, then recorded. A build
 * that is interrupted leaves no file at the final path, or one the manifest does not vouch for.
 */
export class ArtifactBuilds {
  readonly #layout: ImagesLayout;
  readonly #manifest: Manifest;
  readonly #hashes: FileHashCache;
  readonly #runner: CommandRunner;

  constructor(
    layout: ImagesLayout,
    manifest: Manifest,
    hashes: FileHashCache,
    runner: CommandRunner,
  ) {
    this.#layout = layout;
    this.#manifest = manifest;
    this.#hashes = hashes;
    this.#runner = runner;
  }

  get manifest(): Manifest {
    return this.#manifest;
  }

  record(name: ArtifactName): ArtifactRecord | undefined {
    return this.#manifest.artifacts[name];
  }

  /** Why `spec` must be (re)built, or undefined when the artifact on disk is good. */
  async staleReason(spec: ArtifactSpec, force = false): Promise<string | undefined> {
    if (force) return "rebuild requested";
    const record = this.record(spec.name);
    const reason = recordStaleReason(record, spec.recipe, spec.inputs);
    if (reason || !record) return reason;
    if (record.file !== relative(this.#layout.dir, spec.path)) return "moved";
    const sha = await this.#hashes.hash(spec.path);
    if (sha === undefined) return "file missing";
    if (sha !== record.sha256) return "file changed since it was built (sha256 mismatch)";
    return undefined;
  }

  /** Reuses or (re)builds one artifact; `force` rebuilds even a good one. */
  async ensure(spec: ArtifactSpec, force = false): Promise<EnsureResult> {
    const reason = await this.staleReason(spec, force);
    const existing = this.record(spec.name);
    if (!reason && existing) return { record: existing, rebuiltBecause: undefined };
    return { record: await this.build(spec), rebuiltBecause: reason ?? "not built yet" };
  }

  /** Builds `spec` in a scratch directory, renames it into place and records it. */
  async build(spec: ArtifactSpec): Promise<ArtifactRecord> {
    const started = performance.now();
    const workDir = await this.createWorkDir(spec.name);
    try {
      const output = join(workDir, basename(spec.path));
      const details = (await spec.build(output, workDir)) ?? {};
      await rename(output, spec.path);
      const sha256 = await this.#hashes.hash(spec.path);
      if (!sha256) throw new Error(`${spec.path} vanished after it was built`);
      const record: ArtifactRecord = {
        file: relative(this.#layout.dir, spec.path),
        recipe: spec.recipe,
        inputs: spec.inputs,
        sha256,
        sizeBytes: (await stat(spec.path)).size,
        builtAt: new Date().toISOString(),
        buildMs: Math.round(performance.now() - started),
        details,
      };
      this.#manifest.artifacts[spec.name] = record;
      await this.save();
      return record;
    } finally {
      await this.removeTree(workDir);
    }
  }

  async createWorkDir(name: string): Promise<string> {
    await mkdir(this.#layout.tmpDir, { recursive: true });
    return mkdtemp(join(this.#layout.tmpDir, `${name}-`));
  }

  /** rm -rf that never crosses into a mount left inside (a chroot's /proc, say). */
  async removeTree(path: string): Promise<void> {
    await this.#runner.run("rm", ["-rf", "--one-file-system", path]);
  }

  async save(): Promise<void> {
    await writeManifest(this.#layout.manifest, this.#manifest);
    await this.#hashes.save();
  }
}
