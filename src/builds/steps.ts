/**
 * What each build step does inside the build VM. RUN and the start command run in the
 * image's shell; COPY and USER run as root with the agent drive's busybox (`/.warren`), so
 * they work in any image, even one without tar or useradd.
 */
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { Code, ConnectError } from "@connectrpc/connect";
import { linkSafeArchive } from "./copy-archive.js";
import type { CommandContext, GuestShell, RunResult } from "./guest-shell.js";
import type { BuildStep } from "./spec.js";

const BUSYBOX = "/.warren/bin/busybox";
const ROOT: Omit<CommandContext, "envVars"> = { user: "root", workdir: "/" };

/** The user, workdir and environment steps run with; ENV, WORKDIR and USER change it. */
export interface BuildContext extends CommandContext {}

function homeOf(user: string): string {
  return user === "root" ? "/root" : `/home/${user}`;
}

/** Shell-quotes one word. */
function quote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * POSIX sh, run as root: unpacks the uploaded archive, then copies `src` (a path or a glob
 * inside it) to `dest` with Docker's COPY semantics: a directory's contents merge into
 * `dest`; files go into `dest` when it ends with `/`, is a directory already, or the glob
 * matched more than one entry, else they become `dest`; symlinks stay links; owner and mode
 * applied first.
 */
export const COPY_SCRIPT = `set -e
b=${BUSYBOX}
archive=$1 src=$2 dest=$3 owner=$4 mode=$5
tmp=$($b mktemp -d /tmp/.warren-copy.XXXXXX)
trap '$b rm -rf "$tmp" "$archive"' EXIT
$b tar -xf "$archive" -C "$tmp"
group=$($b id -gn "$owner")
count=0
for entry in "$tmp"/$src; do
  if [ -e "$entry" ] || [ -L "$entry" ]; then count=$((count + 1)); fi
done
if [ "$count" -eq 0 ]; then echo "'$src' is not in the uploaded files" >&2; exit 1; fi
into=
case "$dest" in */) into=1 ;; esac
if [ "$count" -gt 1 ] || { [ -d "$dest" ] && [ ! -L "$dest" ]; }; then into=1; fi
[ "$dest" = / ] || dest=\${dest%/}
for entry in "$tmp"/$src; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  $b chown -R -h "$owner:$group" "$entry"
  if [ -n "$mode" ] && [ ! -L "$entry" ]; then $b chmod -R "$mode" "$entry"; fi
  if [ -d "$entry" ] && [ ! -L "$entry" ]; then
    $b mkdir -p "$dest"
    (cd "$entry" && $b tar -cf - .) | $b tar -xf - -C "$dest"
  elif [ -n "$into" ]; then
    $b mkdir -p "$dest"
    $b rm -rf "$dest/$($b basename "$entry")"
    $b mv -f "$entry" "$dest/"
  else
    $b mkdir -p "$($b dirname "$dest")"
    $b mv -f "$entry" "$dest"
  fi
done
`;

/** Adds the user when missing (useradd, else busybox adduser), optionally to passwordless sudo. */
const USER_SCRIPT = `set -e
b=${BUSYBOX}
name=$1 sudo=$2
if ! $b id -u "$name" >/dev/null 2>&1; then
  shell=/bin/sh
  [ -x /bin/bash ] && shell=/bin/bash
  if command -v useradd >/dev/null 2>&1; then useradd -m -s "$shell" "$name"
  else $b adduser -D -s "$shell" "$name"; fi
fi
if [ "$sudo" = true ]; then
  $b mkdir -p /etc/sudoers.d
  echo "$name ALL=(ALL:ALL) NOPASSWD: ALL" >/etc/sudoers.d/90-warren-$name
  $b chmod 0440 /etc/sudoers.d/90-warren-$name
fi
`;

/** `mkdir -p` owned by the context's user when it did not exist (E2B's WORKDIR). */
const WORKDIR_SCRIPT = `set -e
b=${BUSYBOX}
if [ ! -d "$1" ]; then $b mkdir -p "$1"; $b chown "$2:$($b id -gn "$2")" "$1"; fi
`;

export interface StepIo {
  readonly shell: GuestShell;
  /** The archive of a COPY step's files, from its start (a new stream per call). */
  readonly files: (hash: string) => Readable;
  readonly onLine: (line: string) => void;
  readonly signal: AbortSignal;
  readonly timeoutMs: number;
}

/** The context after the step; throws StepFailed when its command fails. */
export function withEnv(context: BuildContext, vars: Readonly<Record<string, string>>) {
  return { ...context, envVars: { ...context.envVars, ...vars } };
}

export async function runStep(
  step: BuildStep,
  context: BuildContext,
  io: StepIo,
): Promise<BuildContext> {
  switch (step.type) {
    case "ENV":
      return withEnv(context, step.vars);
    case "WORKDIR": {
      const path = resolvePath(step.path, context);
      await checked(`WORKDIR ${step.path}`, () =>
        script(io, WORKDIR_SCRIPT, [path, context.user], context),
      );
      return { ...context, workdir: path };
    }
    case "USER":
      await checked(`USER ${step.user}`, () =>
        script(io, USER_SCRIPT, [step.user, String(step.sudo)], context),
      );
      return { ...context, user: step.user };
    case "RUN":
      await checked(step.command, () =>
        io.shell
          .run(
            step.command,
            { ...context, user: step.user ?? context.user },
            { onLine: io.onLine, signal: io.signal, timeoutMs: io.timeoutMs },
          )
          .catch((err: unknown) => {
            // envd refused to start it (a user the image lacks): E2B's words for it.
            if (!(err instanceof ConnectError)) throw err;
            throw new StepFailed(
              step.command,
              undefined,
              `failed to run command '${step.command}': command failed: ${codeName(err.code)}: ${err.rawMessage}`,
            );
          }),
      );
      return context;
    case "COPY": {
      // Streamed from the upload on disk to the guest: never held whole in memory.
      const archive = await linkSafeArchive(() => io.files(step.filesHash));
      const guestPath = `/tmp/.warren-upload-${randomBytes(6).toString("hex")}.tar`;
      await io.shell.upload(guestPath, archive, "root", {
        signal: io.signal,
        timeoutMs: io.timeoutMs,
      });
      const dest = step.dest.endsWith("/")
        ? `${resolvePath(step.dest, context)}/`
        : resolvePath(step.dest, context);
      const owner = step.user ?? context.user;
      await checked(`COPY ${step.src} ${step.dest}`, () =>
        script(io, COPY_SCRIPT, [guestPath, step.src, dest, owner, step.mode ?? ""], context),
      );
      return context;
    }
  }
}

/** A step's command exited non-zero: its exit code and last output lines. */
export class StepFailed extends Error {
  /** Undefined when it never ran (envd refused to start it). */
  readonly exitCode: number | undefined;
  readonly tail: string;

  constructor(what: string, result: RunResult | undefined, message?: string) {
    super(
      message ??
        `'${what}' failed with exit code ${result?.exitCode}${result?.tail ? `:\n${result.tail}` : ""}`,
    );
    this.exitCode = result?.exitCode;
    this.tail = result?.tail ?? "";
  }
}

/** Connect's name of a code, as envd's errors print it: `Code.Unauthenticated` → unauthenticated. */
function codeName(code: Code): string {
  return (Code[code] ?? String(code)).replace(/(?<=[a-z])(?=[A-Z])/g, "_").toLowerCase();
}

async function checked(what: string, run: () => Promise<RunResult>): Promise<void> {
  const result = await run();
  if (result.exitCode !== 0) throw new StepFailed(what, result);
}

/** Runs one of the scripts above as root, its arguments as $1.. (never interpolated). */
function script(io: StepIo, body: string, args: readonly string[], context: BuildContext) {
  const command = `${BUSYBOX} sh -c ${quote(body)} warren ${args.map(quote).join(" ")}`;
  return io.shell.run(
    command,
    { ...ROOT, envVars: context.envVars },
    { onLine: io.onLine, signal: io.signal, timeoutMs: io.timeoutMs },
  );
}

/** Relative paths are relative to the workdir, else to the user's home (as E2B resolves them). */
function resolvePath(path: string, context: BuildContext): string {
  if (path.startsWith("/")) return path.replace(/\/+$/, "") || "/";
  const base = context.workdir ?? homeOf(context.user);
  return `${base.replace(/\/+$/, "")}/${path}`.replace(/\/+$/, "").replace(/\/\.$/, "");
}
