import { WarrenError } from "../shared/index.js";

/** What the image's config says about how to run it: a template builder's defaults. */
export interface ImageRunConfig {
  /** `KEY=value` entries, in the image's order. */
  readonly env: readonly string[];
  readonly workingDir?: string;
  /** `name`, `uid`, `name:group` or `uid:gid`, as the image gives it. */
  readonly user?: string;
  readonly entrypoint?: readonly string[];
  readonly cmd?: readonly string[];
}

const strings = (value: unknown): string[] | undefined =>
  Array.isArray(value) && value.every((v) => typeof v === "string") ? value : undefined;
const nonEmpty = (value: unknown): string | undefined =>
  typeof value === "string" && value !== "" ? value : undefined;

/** Reads the run settings from an image config blob (OCI or Docker; the same `config` object). */
export function parseImageConfig(body: string): ImageRunConfig {
  let doc: { architecture?: unknown; os?: unknown; config?: Record<string, unknown> | null };
  try {
    doc = JSON.parse(body) as typeof doc;
  } catch {
    throw new WarrenError("image_invalid", "the image config is not JSON");
  }
  if (doc.os !== undefined && doc.os !== "linux") {
    throw new WarrenError(
      "image_platform_unsupported",
      `the image is for ${String(doc.os)}, not linux`,
    );
  }
  if (doc.architecture !== undefined && doc.architecture !== "amd64") {
    throw new WarrenError(
      "image_platform_unsupported",
      `the image is for ${String(doc.architecture)}, not amd64`,
    );
  }
  const config = doc.config ?? {};
  const workingDir = nonEmpty(config.WorkingDir);
  const user = nonEmpty(config.User);
  const entrypoint = strings(config.Entrypoint);
  const cmd = strings(config.Cmd);
  return {
    env: strings(config.Env) ?? [],
    ...(workingDir === undefined ? {} : { workingDir }),
    ...(user === undefined ? {} : { user }),
    ...(entrypoint === undefined ? {} : { entrypoint }),
    ...(cmd === undefined ? {} : { cmd }),
  };
}
