/**
 * A build's definition as the SDK sends it (`TemplateBuildStartV2`), checked into typed
 * steps. Every higher-level builder call (`aptInstall`, `gitClone`, `makeDir`, `remove`...)
 * arrives as one of five step types; anything Warren cannot build is a `build_invalid` error
 * naming the step, never ignored. A step that is well-formed but wrong (a user name that is
 * none, an empty command) is an `InvalidStep`: E2B takes such a build and fails it at that
 * step, which the SDK's BuildError points back at the builder call with.
 */
import type { RegistryCredentials } from "../oci-images/index.js";
import { WarrenError } from "../shared/index.js";

export type BuildStep =
  | { readonly type: "RUN"; readonly command: string; readonly user?: string }
  | {
      readonly type: "COPY";
      readonly src: string;
      readonly dest: string;
      readonly user?: string;
      /** Octal, e.g. "0755". */
      readonly mode?: string;
      readonly filesHash: string;
    }
  | { readonly type: "WORKDIR"; readonly path: string }
  /** `sudo`: E2B's second USER argument, "true" adds the user to passwordless sudo. */
  | { readonly type: "USER"; readonly user: string; readonly sudo: boolean }
  | { readonly type: "ENV"; readonly vars: Readonly<Record<string, string>> };

/** A step with its place in the definition: E2B numbers steps from 1 ("base" is 0). */
export type NumberedStep = BuildStep & { readonly number: number; readonly force: boolean };

export type BuildSource =
  | { readonly kind: "template"; readonly reference: string }
  | {
      readonly kind: "image";
      readonly reference: string;
      readonly credentials?: RegistryCredentials;
    };

export interface BuildSpec {
  readonly source: BuildSource;
  readonly steps: readonly NumberedStep[];
  readonly startCmd?: string;
  readonly readyCmd?: string;
  /** The whole build bypasses the cache. */
  readonly force: boolean;
}

/** The SDK's default base image: Warren's own base rootfs. */
export const BASE_IMAGE = "e2bdev/base";

const MAX_STEPS = 1_000;
const MAX_ARG_CHARS = 1024 * 1024;
const USER_NAME = /^[a-z_][a-z0-9_-]{0,31}\$?$|^[0-9]+$/i;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const FILES_HASH = /^[0-9a-f]{64}$/;
const MODE = /^0?[0-7]{3,4}$/;

export function parseBuildSpec(body: unknown): BuildSpec {
  const b = object(body, "the build definition");
  const fromImage = optionalString(b, "fromImage");
  const fromTemplate = optionalString(b, "fromTemplate");
  if (fromImage !== undefined && fromTemplate !== undefined) {
    invalid("base: give fromImage or fromTemplate, not both");
  }
  const rawSteps = b.steps ?? [];
  if (!Array.isArray(rawSteps)) invalid("steps must be an array");
  if (rawSteps.length > MAX_STEPS) invalid(`at most ${MAX_STEPS} steps, got ${rawSteps.length}`);
  const registry =
    b.fromImageRegistry === undefined || b.fromImageRegistry === null
      ? undefined
      : parseCredentials(b.fromImageRegistry);
  if (registry && fromImage === undefined) {
    invalid("base: fromImageRegistry needs fromImage");
  }
  const source: BuildSource =
    fromTemplate !== undefined
      ? { kind: "template", reference: fromTemplate }
      : {
          kind: "image",
          reference: fromImage ?? BASE_IMAGE,
          ...(registry && { credentials: registry }),
        };
  const readyCmd = optionalString(b, "readyCmd");
  const startCmd = optionalString(b, "startCmd");
  return {
    source,
    steps: rawSteps.map((raw, index) => parseStep(raw, index + 1)),
    ...(startCmd && { startCmd }),
    ...(readyCmd && { readyCmd }),
    force: optionalBoolean(b, "force", "the build") ?? false,
  };
}

/** A step whose arguments are wrong, not malformed: the build fails at `step`. */
export class InvalidStep extends WarrenError {
  constructor(
    readonly step: number,
    message: string,
  ) {
    super("build_invalid", message);
  }
}

function parseStep(raw: unknown, number: number): NumberedStep {
  const where = `step ${number}`;
  // Typed on the name, not the arrow: TypeScript narrows after calls of such names only.
  const wrong: (message: string) => never = (message) => {
    throw new InvalidStep(number, message);
  };
  const step = object(raw, where);
  const type = step.type;
  const force = optionalBoolean(step, "force", where) ?? false;
  const args = step.args ?? [];
  if (!Array.isArray(args) || !args.every((a) => typeof a === "string")) {
    invalid(`${where}: args must be an array of strings`);
  }
  if (args.some((a) => a.length > MAX_ARG_CHARS)) invalid(`${where}: an argument is too long`);
  const arg = (i: number) => args[i] as string | undefined;
  const user = (value: string | undefined) => {
    if (value === undefined || value === "") return undefined;
    if (!USER_NAME.test(value)) wrong(`${where} (${type}): '${value}' is not a user name`);
    return value;
  };
  const count = (min: number, max: number) => {
    if (args.length < min || args.length > max) {
      const wanted = min === max ? `${min}` : `${min} to ${max}`;
      wrong(`${where} (${type}): takes ${wanted} arguments, got ${args.length}`);
    }
  };
  switch (type) {
    case "RUN": {
      count(1, 2);
      const command = arg(0) ?? "";
      if (command.trim() === "") wrong(`${where} (RUN): the command is empty`);
      return { type, command, ...withUser(user(arg(1))), number, force };
    }
    case "COPY": {
      count(2, 4);
      const [src, dest] = [arg(0) ?? "", arg(1) ?? ""];
      if (src === "" || dest === "") wrong(`${where} (COPY): source and destination are required`);
      if (src.startsWith("/") || src.split("/").includes("..")) {
        wrong(`${where} (COPY): the source '${src}' must be relative, inside the build context`);
      }
      const filesHash = step.filesHash;
      if (typeof filesHash !== "string" || !FILES_HASH.test(filesHash)) {
        wrong(`${where} (COPY ${src}): filesHash must be the sha256 (hex) of the files`);
      }
      const mode = arg(3) || undefined;
      if (mode !== undefined && !MODE.test(mode)) {
        wrong(`${where} (COPY ${src}): mode '${mode}' is not an octal file mode`);
      }
      return {
        type,
        src,
        dest,
        ...withUser(user(arg(2))),
        ...(mode && { mode }),
        filesHash,
        number,
        force,
      };
    }
    case "WORKDIR": {
      count(1, 1);
      const path = arg(0) ?? "";
      if (path === "") wrong(`${where} (WORKDIR): the path is empty`);
      return { type, path, number, force };
    }
    case "USER": {
      count(1, 2);
      const name = user(arg(0));
      if (name === undefined) wrong(`${where} (USER): the user name is empty`);
      const sudo = arg(1);
      if (sudo !== undefined && sudo !== "true" && sudo !== "false") {
        wrong(`${where} (USER): the second argument must be "true" or "false", got '${sudo}'`);
      }
      return { type, user: name, sudo: sudo === "true", number, force };
    }
    case "ENV": {
      if (args.length === 0 || args.length % 2 !== 0) {
        wrong(`${where} (ENV): takes name, value pairs, got ${args.length} arguments`);
      }
      const vars: Record<string, string> = {};
      for (let i = 0; i < args.length; i += 2) {
        const name = args[i] as string;
        if (!ENV_NAME.test(name)) wrong(`${where} (ENV): '${name}' is not a variable name`);
        vars[name] = args[i + 1] as string;
      }
      return { type, vars, number, force };
    }
    default:
      return invalid(
        `${where}: unsupported step type ${JSON.stringify(type)} (Warren builds RUN, COPY, WORKDIR, USER and ENV)`,
      );
  }
}

function parseCredentials(raw: unknown): RegistryCredentials {
  const r = object(raw, "fromImageRegistry");
  const field = (key: string) => {
    const value = r[key];
    if (typeof value !== "string" || value === "") invalid(`fromImageRegistry.${key} is required`);
    return value;
  };
  switch (r.type) {
    case "registry":
      return { type: "registry", username: field("username"), password: field("password") };
    case "aws":
      return {
        type: "aws",
        awsAccessKeyId: field("awsAccessKeyId"),
        awsSecretAccessKey: field("awsSecretAccessKey"),
        awsRegion: field("awsRegion"),
      };
    case "gcp":
      return { type: "gcp", serviceAccountJson: field("serviceAccountJson") };
    default:
      return invalid(
        `fromImageRegistry.type must be "registry", "aws" or "gcp", got ${JSON.stringify(r.type)}`,
      );
  }
}

function withUser(user: string | undefined): { user?: string } {
  return user === undefined ? {} : { user };
}

function object(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    invalid(`${what} must be a JSON object`);
  }
  return value as Record<string, unknown>;
}

function optionalString(o: Record<string, unknown>, key: string): string | undefined {
  const value = o[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") invalid(`${key} must be a string`);
  if (value.length > MAX_ARG_CHARS) invalid(`${key} is too long`);
  return value;
}

function optionalBoolean(o: Record<string, unknown>, key: string, where: string) {
  const value = o[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") invalid(`${where}: ${key} must be a boolean`);
  return value;
}

function invalid(message: string): never {
  throw new WarrenError("build_invalid", message);
}
