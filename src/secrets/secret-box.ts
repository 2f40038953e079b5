import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmod, mkdir, open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";

const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** What a sealed value starts with: the scheme, so that a later key or cipher can be told apart. */
const PREFIX = "v1:";

/**
 * Seals secret values at rest: AES-256-GCM under a key kept in `<dir>/values.key` (32 random
 * bytes, made on first use, 0600 in a 0700 directory), a fresh IV per value, and the
 * secret's id as associated data (a sealed value copied onto another secret's row does not
 * open). The catalog only ever sees sealed text. In a cluster every node needs the same key
 * file (copy it, as the cluster CA's files are copied).
 */
export class SecretBox {
  readonly #key: Buffer;

  private constructor(key: Buffer) {
    this.#key = key;
  }

  /** The box for the key in `dir`, made there first if missing. */
  static async open(dir: string): Promise<SecretBox> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700);
    const path = join(dir, "values.key");
    try {
      const made = await open(path, "wx", 0o600);
      try {
        await made.writeFile(randomBytes(KEY_BYTES));
      } finally {
        await made.close();
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const key = await readFile(path);
    if (key.length !== KEY_BYTES) {
      throw new WarrenError(
        "internal",
        `${path} holds ${key.length} bytes, not a ${KEY_BYTES}-byte key`,
      );
    }
    return new SecretBox(key);
  }

  seal(secretId: string, value: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    cipher.setAAD(Buffer.from(secretId));
    const sealed = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
    return PREFIX + Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString("base64");
  }

  /** The value; throws (never quoting it) when the text was not sealed here for that id. */
  open(secretId: string, sealed: string): string {
    try {
      if (!sealed.startsWith(PREFIX)) throw new Error("unknown scheme");
      const bytes = Buffer.from(sealed.slice(PREFIX.length), "base64");
      const decipher = createDecipheriv("aes-256-gcm", this.#key, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(secretId));
      decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([
        decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)),
        decipher.final(),
      ]).toString("utf8");
    } catch {
      throw new WarrenError(
        "internal",
        `secret ${secretId} cannot be opened with this node's key (<data>/secrets/values.key differs from the one that sealed it?)`,
      );
    }
  }
}
