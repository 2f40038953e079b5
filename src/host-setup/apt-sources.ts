import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";

/** One apt source entry (either file format), reduced to what mirror selection needs. */
export interface AptSource {
  readonly uris: readonly string[];
  readonly suites: readonly string[];
  readonly components: readonly string[];
}

/** The Debian mirrors a guest rootfs is built from (and whose apt it is configured with). */
export interface DebianMirrors {
  readonly archive: string;
  readonly security: string;
}

export const DEFAULT_MIRRORS: DebianMirrors = {
  archive: "http://deb.debian.org/debian",
  security: "http://deb.debian.org/debian-security",
};

/** One-line format (sources.list): `deb [options] uri suite component...`. */
export function parseSourcesList(text: string): AptSource[] {
  const out: AptSource[] = [];
  for (const raw of text.split("\n")) {
    const line = raw
      .replace(/#.*/, "")
      .replace(/\[[^\]]*\]/, " ")
      .trim();
    const [type, uri, suite, ...components] = line.split(/\s+/);
    if (type === "deb" && uri && suite) out.push({ uris: [uri], suites: [suite], components });
  }
  return out;
}

/** deb822 format (*.sources): stanzas of `Field: value`, separated by blank lines. */
export function parseDeb822Sources(text: string): AptSource[] {
  const out: AptSource[] = [];
  const lines = text.split("\n").filter((line) => !line.startsWith("#"));
  for (const stanza of lines.join("\n").split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    let last: string | undefined;
    for (const line of stanza.split("\n")) {
      const field = /^([\w-]+):\s*(.*)$/.exec(line);
      if (field?.[1]) {
        last = field[1].toLowerCase();
        fields.set(last, field[2] ?? "");
      } else if (last && /^\s/.test(line)) {
        fields.set(last, `${fields.get(last)} ${line.trim()}`);
      }
    }
    const words = (name: string) => (fields.get(name) ?? "").split(/\s+/).filter(Boolean);
    if (!words("types").includes("deb") || fields.get("enabled")?.trim() === "no") continue;
    out.push({ uris: words("uris"), suites: words("suites"), components: words("components") });
  }
  return out;
}

/** The host's enabled apt sources: /etc/apt/sources.list and sources.list.d/*.{list,sources}. */
export async function hostAptSources(etcApt = "/etc/apt"): Promise<AptSource[]> {
  const read = (path: string) => readFile(path, "utf8").catch(() => "");
  const out = parseSourcesList(await read(join(etcApt, "sources.list")));
  const dir = join(etcApt, "sources.list.d");
  for (const name of (await readdir(dir).catch(() => [] as string[])).sort()) {
    if (name.endsWith(".list")) out.push(...parseSourcesList(await read(join(dir, name))));
    if (name.endsWith(".sources")) out.push(...parseDeb822Sources(await read(join(dir, name))));
  }
  return out;
}

/**
 * The host's mirrors for `suite` (main archive) and `suite`-security, so the guest is built
 * from the mirror the host already uses; deb.debian.org where the host names none (say, an
 * Ubuntu host).
 */
export function debianMirrors(sources: readonly AptSource[], suite: string): DebianMirrors {
  const find = (wanted: string) =>
    sources.find((s) => s.suites.includes(wanted) && s.components.includes("main"))?.uris[0];
  return {
    archive: find(suite) ?? DEFAULT_MIRRORS.archive,
    security: find(`${suite}-security`) ?? DEFAULT_MIRRORS.security,
  };
}
