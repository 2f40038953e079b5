import { WarrenError } from "../shared/index.js";

/** Media types of manifests, in the Accept header of every manifest request. */
export const MANIFEST_MEDIA_TYPES = {
  ociIndex: "application/vnd.oci.image.index.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  ociManifest: "application/vnd.oci.image.manifest.v1+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
} as const;

export const MANIFEST_ACCEPT = Object.values(MANIFEST_MEDIA_TYPES).join(", ");

/** A content-addressed blob a manifest points at. */
export interface Descriptor {
  readonly mediaType: string;
  readonly digest: string;
  readonly size: number;
  readonly platform?: {
    readonly os?: string;
    readonly architecture?: string;
    readonly variant?: string;
  };
}

/** An index (OCI) or manifest list (Docker): one manifest per platform. */
export interface ImageIndex {
  readonly kind: "index";
  readonly manifests: readonly Descriptor[];
}

/** One platform's image: its config blob and its layers, lowest first. */
export interface ImageManifest {
  readonly kind: "manifest";
  readonly config: Descriptor;
  readonly layers: readonly Descriptor[];
}

const DIGEST = /^sha256:[a-f0-9]{64}$/;

function invalid(what: string): WarrenError {
  return new WarrenError("image_invalid", what);
}

function descriptor(value: unknown, where: string): Descriptor {
  const d = value as Partial<Descriptor> | null;
  if (!d || typeof d !== "object") throw invalid(`${where} is not an object`);
  if (typeof d.digest !== "string" || !DIGEST.test(d.digest)) {
    throw invalid(`${where} has no sha256 digest (other algorithms are not supported)`);
  }
  if (typeof d.size !== "number" || !Number.isSafeInteger(d.size) || d.size < 0) {
    throw invalid(`${where} has no valid size`);
  }
  return {
    mediaType: typeof d.mediaType === "string" ? d.mediaType : "",
    digest: d.digest,
    size: d.size,
    ...(d.platform && typeof d.platform === "object" ? { platform: d.platform } : {}),
  };
}

/**
 * Reads a manifest document: an OCI index or Docker manifest list, or an OCI or Docker v2
 * image manifest. The media type comes from the body, else the Content-Type header (Docker
 * schema 1 manifests are refused: registries have not served them for years).
 */
export function parseManifest(body: string, contentType: string): ImageIndex | ImageManifest {
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(body) as Record<string, unknown>;
  } catch {
    throw invalid("the manifest is not JSON");
  }
  const mediaType =
    typeof doc.mediaType === "string" ? doc.mediaType : contentType.split(";")[0]?.trim();
  if (doc.schemaVersion !== 2)
    throw invalid(`manifest schemaVersion ${String(doc.schemaVersion)} is not supported`);
  const isIndex =
    mediaType === MANIFEST_MEDIA_TYPES.ociIndex ||
    mediaType === MANIFEST_MEDIA_TYPES.dockerList ||
    (mediaType !== MANIFEST_MEDIA_TYPES.ociManifest &&
      mediaType !== MANIFEST_MEDIA_TYPES.dockerManifest &&
      Array.isArray(doc.manifests));
  if (isIndex) {
    if (!Array.isArray(doc.manifests)) throw invalid("the image index has no manifests");
    return {
      kind: "index",
      manifests: doc.manifests.map((m, i) => descriptor(m, `index entry ${i}`)),
    };
  }
  if (!Array.isArray(doc.layers)) throw invalid("the image manifest has no layers");
  return {
    kind: "manifest",
    config: descriptor(doc.config, "the manifest's config"),
    layers: doc.layers.map((l, i) => descriptor(l, `layer ${i}`)),
  };
}

/**
 * The linux/amd64 entry of an index (Warren's guests are x86-64). Attestation entries
 * (`unknown/unknown`) never match; among several amd64 entries the one without a variant wins.
 */
export function selectLinuxAmd64(index: ImageIndex): Descriptor | undefined {
  const candidates = index.manifests.filter(
    (m) => m.platform?.os === "linux" && m.platform.architecture === "amd64",
  );
  return candidates.find((m) => !m.platform?.variant) ?? candidates[0];
}

/** The platforms an index offers, for the message when linux/amd64 is missing. */
export function describePlatforms(index: ImageIndex): string {
  const names = index.manifests
    .map((m) =>
      [m.platform?.os, m.platform?.architecture, m.platform?.variant].filter(Boolean).join("/"),
    )
    .filter((name) => name !== "" && name !== "unknown/unknown");
  return names.length > 0 ? names.join(", ") : "none";
}

/** How a layer blob is compressed (sniffed from its first bytes: layer-decompress.ts). */
export type LayerCompression = "gzip" | "zstd" | "none";
