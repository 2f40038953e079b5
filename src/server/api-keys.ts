import { randomBytes } from "node:crypto";
import { chmodSync, type FSWatcher, readFileSync, statSync, watch } from "node:fs";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../shared/index.js";

export interface ApiKeys {
  /** Every accepted key: the file's lines and the configured extras. */
  readonly keys: ReadonlySet<string>;
  readonly file: string;
  /** Set when this start generated the key (print it once). */
  readonly generated?: string;
}

const FILE_NAME = "api-key";

/** Keys in the file's text: one a line, blank lines and `#` comments skipped. */
function parseKeys(text: string): string[] {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
}

/**
 * The API key file `<secrets>/api-key` (0600, one key per line): generated on first start
 * in the format the E2B SDK accepts (`e2b_` + hex), kept afterwards.
 */
export async function loadApiKeys(secretsDir: string, extra: readonly string[]): Promise<ApiKeys> {
  const file = join(secretsDir, FILE_NAME);
  await mkdir(secretsDir, { recursive: true, mode: 0o700 });
  await chmod(secretsDir, 0o700);
  let text = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw err;
  });
  let generated: string | undefined;
  if (text === undefined || text.trim() === "") {
    generated = `e2b_${randomBytes(20).toString("hex")}`;
    text = `${generated}\n`;
    await writeFile(file, text, { mode: 0o600, flag: "w" });
  }
  await chmod(file, 0o600);
  return { keys: new Set([...parseKeys(text), ...extra]), file, generated };
}

export interface LiveApiKeysOptions {
  readonly logger: Logger;
  /**
   * Longest a request goes without the file being stat'ed, ms (default 1000): the fallback
   * for a change the directory watch did not report (a watch that failed, a file system
   * without inotify). Changes the watch sees apply at once.
   */
  readonly checkIntervalMs?: number;
  /** Watch the directory (default true); tests turn it off to exercise the fallback. */
  readonly watch?: boolean;
}

/**
 * The key file kept current while the server runs: a key removed from the file is refused
 * from the next request on, a key added is accepted, without a restart.
 *
 * Changes are noticed two ways: `fs.watch` on the secrets directory (not the file: editors
 * and `mv` replace the file, and a watch on the old inode would go quiet), and, on use, a
 * stat of the file at most every `checkIntervalMs` comparing inode, size, mtime and ctime.
 *
 * A file that is missing, unreadable or holds no key keeps the last good set, with one
 * `api_keys.reload_failed` warning per change: an editor's half-done save, or a slip, must
 * neither lock every client out silently nor crash the server. To revoke every key in the
 * file, write a new one in it. The extras (`WARREN_API_KEYS`) are always accepted.
 */
export class LiveApiKeys {
  readonly file: string;
  readonly #extra: readonly string[];
  readonly #log: Logger;
  readonly #checkIntervalMs: number;
  #keys: ReadonlySet<string>;
  #stamp: string;
  #checkedAt: number;
  #watcher: FSWatcher | undefined;

  constructor(loaded: ApiKeys, extra: readonly string[], options: LiveApiKeysOptions) {
    this.file = loaded.file;
    this.#extra = extra;
    this.#log = options.logger;
    this.#checkIntervalMs = options.checkIntervalMs ?? 1_000;
    this.#keys = loaded.keys;
    this.#stamp = stampOf(this.file);
    this.#checkedAt = Date.now();
    if (options.watch !== false) this.#watch(join(this.file, ".."));
  }

  /** The keys accepted now (re-read first if the file changed). */
  get keys(): ReadonlySet<string> {
    if (Date.now() - this.#checkedAt >= this.#checkIntervalMs) this.refresh();
    return this.#keys;
  }

  /** Re-reads the file if it changed since the last look. */
  refresh(): void {
    this.#checkedAt = Date.now();
    const stamp = stampOf(this.file);
    if (stamp === this.#stamp) return;
    this.#stamp = stamp;
    let fromFile: string[];
    try {
      fromFile = parseKeys(readFileSync(this.file, "utf8"));
      if (fromFile.length === 0) throw new Error("the file holds no key");
    } catch (err) {
      this.#log.warn(
        { file: this.file, err: err instanceof Error ? err.message : String(err) },
        "api_keys.reload_failed",
      );
      return;
    }
    this.#keys = new Set([...fromFile, ...this.#extra]);
    this.#tightenMode();
    this.#log.info({ file: this.file, keys: fromFile.length }, "api_keys.reloaded");
  }

  close(): void {
    this.#watcher?.close();
    this.#watcher = undefined;
  }

  #watch(dir: string): void {
    try {
      this.#watcher = watch(dir, { persistent: false }, (_event, name) => {
        // Some platforms name no file: then any change in the directory is worth a look.
        if (name === null || name === FILE_NAME) this.refresh();
      });
      this.#watcher.on("error", (err) => {
        this.#log.warn({ dir, err: err.message }, "api_keys.watch_failed");
        this.close();
      });
    } catch (err) {
      this.#log.warn(
        { dir, err: err instanceof Error ? err.message : String(err) },
        "api_keys.watch_failed",
      );
    }
  }

  /** A file replaced by an editor may have come back group- or world-readable. */
  #tightenMode(): void {
    try {
      // Only when needed: every chmod changes ctime, which would look like another change.
      if ((statSync(this.file).mode & 0o077) !== 0) chmodSync(this.file, 0o600);
    } catch {
      // The next stat or read reports what is wrong with the file.
    }
  }
}

/** What identifies one version of the file; "missing" (or the error) when it cannot be stat'ed. */
function stampOf(file: string): string {
  try {
    const st = statSync(file, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch (err) {
    return `error:${(err as NodeJS.ErrnoException).code ?? "unknown"}`;
  }
}
