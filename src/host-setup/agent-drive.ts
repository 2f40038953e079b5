import { existsSync } from "node:fs";
import { chmod, copyFile, mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { AGENT_INIT } from "./agent-init.js";
import type { ArtifactSpec } from "./artifact-builds.js";
import type { CommandRunner } from "./command.js";
import { makeExt4Image } from "./ext4-image.js";
import { type FileHashCache, sha256Text } from "./file-hash.js";
import type { ArtifactRecord } from "./manifest.js";
import type { StepProgress } from "./progress.js";
import { sharedLibraries } from "./shared-libs.js";

/** Bump when the drive's layout or the way it is built changes. */
export const AGENT_DRIVE_RECIPE = 2;

const MiB = 1024 * 1024;

export interface AgentDriveSources {
  /** The built agent: envd.mjs and build/Release/*.node (`npm run build` → dist/agent). */
  readonly agentDir: string;
  /** The Node binary to ship (the host's own). */
  readonly node: string;
  readonly busybox: string;
  readonly tini: string;
  /** e2fsprogs' resize2fs: grows the root filesystem when a VM's disk is larger than its image. */
  readonly resize2fs: string;
}

/** Recorded with the drive: which host file each lib/ entry came from (`dest=path ...`). */
function formatLibraries(files: ReadonlyMap<string, string>): string {
  return [...files]
    .filter(([dest]) => dest.startsWith("lib/"))
    .map(([dest, path]) => `${dest}=${path}`)
    .join(" ");
}

function parseLibraries(text: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const pair of (text ?? "").split(" ").filter(Boolean)) {
    const eq = pair.indexOf("=");
    if (eq > 0) out.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return out;
}

/**
 * The drive's files (path on the drive → path on the host), per docs/guest-boot.md: node with
 * every shared library it and the agent's addons need, plus the loader under a fixed name.
 * ldd costs ~50 ms a binary, so while node and the addons are unchanged since `previous` was
 * built, the library paths recorded with it are reused (their contents are still hashed).
 */
export async function agentDriveFiles(options: {
  sources: AgentDriveSources;
  runner: CommandRunner;
  hashes: FileHashCache;
  previous: ArtifactRecord | undefined;
}): Promise<Map<string, string>> {
  const { sources } = options;
  const release = join(sources.agentDir, "build", "Release");
  const addons = (await readdir(release)).filter((name) => name.endsWith(".node")).sort();
  const files = new Map<string, string>([
    ["bin/busybox", sources.busybox],
    ["bin/tini", sources.tini],
    ["bin/node", sources.node],
    ["bin/resize2fs", sources.resize2fs],
    ["envd/envd.mjs", join(sources.agentDir, "envd.mjs")],
  ]);
  for (const addon of addons) files.set(`envd/build/Release/${addon}`, join(release, addon));
  // The code interpreter's kernel drivers (python/*.py, js-kernel.mjs), run by envd.
  const interpreter = join(sources.agentDir, "interpreter");
  const drivers = existsSync(interpreter)
    ? await readdir(interpreter, { recursive: true, withFileTypes: true })
    : [];
  for (const entry of drivers
    .filter((e) => e.isFile())
    .sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(entry.parentPath, entry.name);
    files.set(`envd/interpreter/${relative(interpreter, path)}`, path);
  }
  const dynamic = new Set(["bin/node", "bin/resize2fs"]);
  const elfs = [...files].filter(([dest]) => dynamic.has(dest) || dest.endsWith(".node"));

  const recorded = parseLibraries(options.previous?.details.libraries);
  const unchanged =
    recorded.size > 0 &&
    (await Promise.all(
      elfs.map(
        async ([dest, path]) =>
          (await options.hashes.hash(path)) === options.previous?.inputs[dest],
      ),
    ).then((same) => same.every(Boolean))) &&
    [...recorded.values()].every((path) => existsSync(path));
  if (unchanged) {
    for (const [dest, path] of recorded) files.set(dest, path);
    return files;
  }
  const libs = await sharedLibraries(
    options.runner,
    elfs.map(([, path]) => path),
  );
  files.set("lib/ld-linux-x86-64.so.2", libs.loader);
  for (const [soname, path] of [...libs.libs].sort()) files.set(`lib/${soname}`, path);
  return files;
}

/** The agent drive as an artifact: its inputs are the sha256 of every file it holds and of init. */
export async function agentDriveSpec(options: {
  path: string;
  sources: AgentDriveSources;
  runner: CommandRunner;
  hashes: FileHashCache;
  step: StepProgress;
  /** The drive's record from the last build, if any. */
  previous: ArtifactRecord | undefined;
}): Promise<ArtifactSpec> {
  const { runner } = options;
  const files = await agentDriveFiles(options);
  const inputs = await options.hashes.hashAll(Object.fromEntries(files));
  inputs.init = sha256Text(AGENT_INIT);
  return {
    name: "agent-drive",
    path: options.path,
    recipe: AGENT_DRIVE_RECIPE,
    inputs,
    async build(output, workDir) {
      const root = join(workDir, "drive");
      const node = options.sources.node;
      const envd = join(options.sources.agentDir, "envd.mjs");
      const [nodeVersion, envdVersion] = await Promise.all([
        runner.run(node, ["--version"]).then((r) => r.stdout.trim()),
        runner.run(node, [envd, "--version"]).then((r) => r.stdout.trim()),
      ]);
      await options.step.task(`staging ${files.size} files`, async () => {
        for (const [dest, src] of files) {
          const target = join(root, dest);
          await mkdir(dirname(target), { recursive: true });
          await copyFile(src, target);
          const program = /^(bin|lib)\//.test(dest) || dest.endsWith(".node");
          await chmod(target, program ? 0o755 : 0o644);
        }
        await writeFile(join(root, "init"), AGENT_INIT, { mode: 0o755 });
        await writeFile(
          join(root, "VERSION"),
          `agent-drive recipe ${AGENT_DRIVE_RECIPE}\nenvd ${envdVersion}\nnode ${nodeVersion}\n`,
        );
      });
      const size = await options.step.task("mkfs.ext4", () =>
        makeExt4Image({
          source: root,
          output,
          label: "warren-agent",
          freeBytes: 8 * MiB,
          journal: false,
          runner,
        }),
      );
      return {
        envdVersion,
        nodeVersion,
        sizeMiB: String(size / MiB),
        libraries: formatLibraries(files),
      };
    },
  };
}
