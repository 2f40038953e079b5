import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface ApiKeys {
  /** Every accepted key: the file's lines and the configured extras. */
  readonly keys: ReadonlySet<string>;
  readonly file: string;
  /** Set when this start generated the key (print it once). */
  readonly generated?: string;
}

/**
 * The API key file `<secrets>/api-key` (0600, one key per line): generated on first start
 * in the format the E2B SDK accepts (`e2b_` + hex), kept afterwards.
 */
export async function loadApiKeys(secretsDir: string, extra: readonly string[]): Promise<ApiKeys> {
  const file = join(secretsDir, "api-key");
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
  const fromFile = text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
  return { keys: new Set([...fromFile, ...extra]), file, generated };
}
