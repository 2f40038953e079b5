import assert from "node:assert/strict";
import { it } from "node:test";
import { formatImageReference, parseImageReference } from "./image-reference.js";

const DIGEST = `sha256:${"ab".repeat(32)}`;

it("defaults to docker.io, library/ and latest as Docker does", () => {
  const cases: [string, string][] = [
    ["debian:stable", "docker.io/library/debian:stable"],
    ["alpine:3.20", "docker.io/library/alpine:3.20"],
    ["ubuntu", "docker.io/library/ubuntu:latest"],
    ["library/x", "docker.io/library/x:latest"],
    ["e2bdev/code-interpreter:1.2", "docker.io/e2bdev/code-interpreter:1.2"],
    ["index.docker.io/library/node:20", "docker.io/library/node:20"],
    ["ghcr.io/a/b:tag", "ghcr.io/a/b:tag"],
    ["ghcr.io/a/b/c", "ghcr.io/a/b/c:latest"],
    ["localhost/x", "localhost/x:latest"],
    [`host:5000/x@${DIGEST}`, `host:5000/x@${DIGEST}`],
    [`127.0.0.1:5000/team/x:v1@${DIGEST}`, `127.0.0.1:5000/team/x:v1@${DIGEST}`],
    ["python:3.12-slim-bookworm", "docker.io/library/python:3.12-slim-bookworm"],
  ];
  for (const [input, canonical] of cases) {
    assert.equal(formatImageReference(parseImageReference(input)), canonical, input);
  }
  assert.deepEqual(parseImageReference(`host:5000/x@${DIGEST}`), {
    registry: "host:5000",
    repository: "x",
    digest: DIGEST,
  });
});

it("treats a first component without . or : as a Docker Hub namespace", () => {
  const ref = parseImageReference("myorg/tool:1");
  assert.equal(ref.registry, "docker.io");
  assert.equal(ref.repository, "myorg/tool");
});

it("refuses malformed references with invalid_argument", () => {
  for (const bad of [
    "",
    "Debian",
    "debian:",
    "debian@sha256:123",
    "a//b",
    "debian:bad tag",
    "-x",
    "ghcr.io/",
  ]) {
    assert.throws(
      () => parseImageReference(bad),
      (err: Error & { reason?: string }) => err.reason === "invalid_argument",
      bad,
    );
  }
});
