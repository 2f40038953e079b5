import { WarrenError } from "../shared/index.js";

/** Docker Hub's name in references; its API lives at another host (see registry-endpoints.ts). */
export const DOCKER_HUB = "docker.io";

/** A parsed image reference: where the image lives and which version of it. */
export interface ImageReference {
  /** Registry host[:port], e.g. `docker.io`, `ghcr.io`, `127.0.0.1:5000`. */
  readonly registry: string;
  /** Repository path inside the registry, e.g. `library/debian`. */
  readonly repository: string;
  /** Tag; `latest` when neither a tag nor a digest was given. */
  readonly tag?: string;
  /** `sha256:<hex>` when pinned; wins over the tag for what is pulled. */
  readonly digest?: string;
}

// The grammar of distribution/reference (reference.go), less its rarely used corners.
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const HOST =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::\d{1,5})?$/;

function invalid(text: string, why: string): WarrenError {
  return new WarrenError("invalid_argument", `image reference ${JSON.stringify(text)} ${why}`);
}

/**
 * Parses `debian:stable`, `library/x`, `ghcr.io/a/b:tag`, `host:5000/x@sha256:…` as Docker
 * does: the first path component is a registry only when it has a `.` or a `:` or is
 * `localhost`; otherwise the registry is docker.io, where one-component names live under
 * `library/`; no tag and no digest means `latest`.
 */
export function parseImageReference(text: string): ImageReference {
  const input = text.trim();
  if (input === "" || input.length > 512) throw invalid(text, "is empty or too long");
  let rest = input;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid(text, "has a digest that is not sha256:<64 hex>");
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(text, "has an invalid tag");
  }
  const parts = rest.split("/");
  let registry = DOCKER_HUB;
  const first = parts[0] ?? "";
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    if (!HOST.test(first)) throw invalid(text, "has an invalid registry host");
    registry = first;
    parts.shift();
  }
  // Docker's own aliases of Docker Hub name the same images.
  if (registry === "index.docker.io" || registry === "registry-1.docker.io") registry = DOCKER_HUB;
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift("library");
  if (parts.length === 0 || !parts.every((part) => COMPONENT.test(part))) {
    throw invalid(text, "has an invalid repository name (lowercase letters, digits, . _ - and /)");
  }
  const repository = parts.join("/");
  if (tag === undefined && digest === undefined) tag = "latest";
  return {
    registry,
    repository,
    ...(tag === undefined ? {} : { tag }),
    ...(digest === undefined ? {} : { digest }),
  };
}

/** The canonical text of a reference: `docker.io/library/debian:stable`. */
export function formatImageReference(ref: ImageReference): string {
  const tag = ref.tag === undefined ? "" : `:${ref.tag}`;
  const digest = ref.digest === undefined ? "" : `@${ref.digest}`;
  return `${ref.registry}/${ref.repository}${tag}${digest}`;
}

/** What to ask the registry's manifest endpoint for: the digest if pinned, else the tag. */
export function manifestSelector(ref: ImageReference): string {
  return ref.digest ?? ref.tag ?? "latest";
}
