import { basename } from "node:path";
import { WarrenError } from "../shared/index.js";
import type { CommandRunner } from "./command.js";

export interface LddResult {
  /** The dynamic loader the binary asks for, e.g. /lib64/ld-linux-x86-64.so.2. */
  readonly loader: string | undefined;
  /** soname → resolved path; undefined path = "not found". */
  readonly libs: ReadonlyMap<string, string | undefined>;
}

/** Parses `ldd` output (the vDSO is skipped: the kernel provides it). */
export function parseLdd(output: string): LddResult {
  let loader: string | undefined;
  const libs = new Map<string, string | undefined>();
  for (const raw of output.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("linux-vdso") || line.startsWith("linux-gate")) continue;
    const arrow = /^(\S+)\s+=>\s+(not found|\S+)/.exec(line);
    if (arrow?.[1] && arrow[2]) {
      libs.set(arrow[1], arrow[2] === "not found" ? undefined : arrow[2]);
      continue;
    }
    const bare = /^(\/\S+)\s+\(0x[0-9a-f]+\)$/.exec(line);
    if (bare?.[1]) loader = bare[1];
  }
  return { loader, libs };
}

export interface SharedLibraries {
  readonly loader: string;
  /** soname → path on the host, for every library any of the binaries needs. */
  readonly libs: ReadonlyMap<string, string>;
}

/** The loader and the union of the shared libraries the given ELF files need (through ldd). */
export async function sharedLibraries(
  runner: CommandRunner,
  binaries: readonly string[],
): Promise<SharedLibraries> {
  let loader: string | undefined;
  const libs = new Map<string, string>();
  for (const binary of binaries) {
    const { stdout } = await runner.run("ldd", [binary]);
    const parsed = parseLdd(stdout);
    loader ??= parsed.loader;
    for (const [soname, path] of parsed.libs) {
      if (!path)
        throw new WarrenError("internal", `${binary} needs ${soname}, which ldd cannot find`);
      // The loader shows up as a library of some objects too; it is copied once, by its own name.
      if (parsed.loader && basename(path) === basename(parsed.loader)) continue;
      libs.set(soname, path);
    }
  }
  if (!loader)
    throw new WarrenError("internal", `ldd names no dynamic loader for ${binaries.join(", ")}`);
  return { loader, libs };
}
