import { readFile, rename, writeFile } from "node:fs/promises";

/** Bump when the shape of manifest.json changes; an older file is ignored (all rebuilt). */
export const MANIFEST_FORMAT = 1;

export type ArtifactName =
  | "kernel"
  | "initramfs"
  | "agent-drive"
  | "base-rootfs"
  | "debootstrap"
  | "code-interpreter-rootfs";

export const ARTIFACT_NAMES: readonly ArtifactName[] = [
  "kernel",
  "initramfs",
  "agent-drive",
  "base-rootfs",
  "debootstrap",
  "code-interpreter-rootfs",
];

/** What manifest.json says about one built artifact. */
export interface ArtifactRecord {
  /** Path relative to the images directory. */
  readonly file: string;
  /** Version of the recipe that built it (bumped in code when the recipe changes). */
  readonly recipe: number;
  /** sha256 (or exact value, for versions and names) of everything it was built from. */
  readonly inputs: Readonly<Record<string, string>>;
  readonly sha256: string;
  readonly sizeBytes: number;
  readonly builtAt: string;
  readonly buildMs: number;
  /** Facts learnt while building (e.g. the kernel release), for consumers. */
  readonly details: Readonly<Record<string, string>>;
}

export interface Manifest {
  readonly format: number;
  artifacts: Partial<Record<ArtifactName, ArtifactRecord>>;
}

export function emptyManifest(): Manifest {
  return { format: MANIFEST_FORMAT, artifacts: {} };
}

/** Reads manifest.json; a missing, unparsable or other-format file reads as empty. */
export async function readManifest(path: string): Promise<Manifest> {
  try {
    const parsed = JSON.parse(await readFile(path, "utf8")) as Partial<Manifest>;
    if (parsed.format !== MANIFEST_FORMAT || typeof parsed.artifacts !== "object")
      return emptyManifest();
    return { format: MANIFEST_FORMAT, artifacts: parsed.artifacts ?? {} };
  } catch {
    return emptyManifest();
  }
}

export async function writeManifest(path: string, manifest: Manifest): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(manifest, null, 2)}\n`);
  await rename(tmp, path);
}

/**
 * Why a recorded artifact cannot be reused with this recipe and these inputs, or undefined when
 * it can (as far as the record goes: the output's own hash is checked separately).
 */
export function recordStaleReason(
  record: ArtifactRecord | undefined,
  recipe: number,
  inputs: Readonly<Record<string, string>>,
): string | undefined {
  if (!record) return "not built yet";
  if (record.recipe !== recipe) return `recipe ${record.recipe} → ${recipe}`;
  const names = new Set([...Object.keys(record.inputs), ...Object.keys(inputs)]);
  const changed = [...names].filter((name) => record.inputs[name] !== inputs[name]).sort();
  if (changed.length > 0) {
    const shown = changed.slice(0, 3).join(", ");
    return `input${changed.length > 1 ? "s" : ""} changed: ${shown}${changed.length > 3 ? ", ..." : ""}`;
  }
  return undefined;
}
