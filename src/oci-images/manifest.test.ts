import assert from "node:assert/strict";
import { it } from "node:test";
import { MANIFEST_MEDIA_TYPES, parseManifest, selectLinuxAmd64 } from "./manifest.js";

const digest = (c: string) => `sha256:${c.repeat(64)}`;

it("reads a Docker v2 manifest, its media type from the Content-Type header", () => {
  const body = JSON.stringify({
    schemaVersion: 2,
    config: {
      mediaType: "application/vnd.docker.container.image.v1+json",
      digest: digest("c"),
      size: 10,
    },
    layers: [
      {
        mediaType: "application/vnd.docker.image.rootfs.diff.tar.gzip",
        digest: digest("1"),
        size: 5,
      },
    ],
  });
  const parsed = parseManifest(body, `${MANIFEST_MEDIA_TYPES.dockerManifest}; charset=utf-8`);
  assert.equal(parsed.kind, "manifest");
  assert.equal(parsed.kind === "manifest" && parsed.layers[0]?.digest, digest("1"));
});

it("picks linux/amd64 from a manifest list, skipping attestations and variants", () => {
  const entry = (architecture: string, c: string, variant?: string) => ({
    mediaType: MANIFEST_MEDIA_TYPES.dockerManifest,
    digest: digest(c),
    size: 1,
    platform: {
      os: architecture === "unknown" ? "unknown" : "linux",
      architecture,
      ...(variant ? { variant } : {}),
    },
  });
  const index = parseManifest(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MANIFEST_MEDIA_TYPES.dockerList,
      manifests: [
        entry("unknown", "0"),
        entry("amd64", "2", "v3"),
        entry("amd64", "1"),
        entry("arm64", "3"),
      ],
    }),
    "",
  );
  assert.equal(index.kind, "index");
  if (index.kind === "index") assert.equal(selectLinuxAmd64(index)?.digest, digest("1"));
});

it("refuses schema 1 and descriptors without a sha256 digest", () => {
  const invalid = (err: Error & { reason?: string }) => err.reason === "image_invalid";
  assert.throws(
    () => parseManifest(JSON.stringify({ schemaVersion: 1, fsLayers: [] }), ""),
    invalid,
  );
  assert.throws(
    () =>
      parseManifest(
        JSON.stringify({ schemaVersion: 2, config: { digest: "sha512:ab", size: 1 }, layers: [] }),
        MANIFEST_MEDIA_TYPES.ociManifest,
      ),
    invalid,
  );
  assert.throws(() => parseManifest("<html>", ""), invalid);
});
