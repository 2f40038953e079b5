import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmod, mkdir, open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { WarrenError } from "../shared/index.js";

const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Whose a sealed value is: what it is bound to (its associated data). */
export interface SealedFor {
  readonly teamId: string;
  readonly secretId: string;
  /** The hosts it may be sent to (its `allowedHosts`); none: any host its rules name. */
  readonly hosts?: readonly string[];
}

/**
 * Seals secret values at rest: AES-256-GCM under a key kept in `<dir>/values.key` (32 random
 * bytes, made on first use, 0600 in a 0700 directory) and a fresh IV per value. The sealed
 * text is `v2:<hosts>:<iv, tag, ciphertext>`: its hosts in the clear (not secret: the API
 * lists them without opening anything), and the secret's team, id and hosts as associated
 * data — a sealed value copied onto another secret's row, another team's, or with its hosts
 * edited in the catalog, does not open. The catalog only ever sees sealed text. In a cluster
 * every node needs the same key file (copy it, as the cluster CA's files are copied). Values
 * sealed before (`v1:`, the id alone as associated data) still open; each is sealed anew at
 * its next update.
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

  seal(owner: SealedFor, value: string): string {
    const hosts = owner.hosts ?? [];
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    cipher.setAAD(associatedData(owner.teamId, owner.secretId, hosts));
    const sealed = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
    const hostsText = Buffer.from(JSON.stringify(hosts)).toString("base64url");
    return `v2:${hostsText}:${Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString("base64")}`;
  }

  /** The value; throws (never quoting it) when the text was not sealed here for that owner. */
  open(owner: Omit<SealedFor, "hosts">, sealed: string): string {
    try {
      const parsed = parseSealed(sealed);
      const aad =
        parsed.version === 1
          ? Buffer.from(owner.secretId)
          : associatedData(owner.teamId, owner.secretId, parsed.hosts);
      const { bytes } = parsed;
      const decipher = createDecipheriv("aes-256-gcm", this.#key, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(aad);
      decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([
        decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)),
        decipher.final(),
      ]).toString("utf8");
    } catch {
      throw new WarrenError(
        "internal",
        `secret ${owner.secretId} cannot be opened with this node's key (<data>/secrets/values.key differs from the one that sealed it?)`,
      );
    }
  }

  /** The hosts a sealed value is bound to, read without opening it (none: unbound). */
  static hostsOf(sealed: string): readonly string[] {
    try {
      return parseSealed(sealed).hosts;
    } catch {
      return [];
    }
  }
}

function associatedData(teamId: string, secretId: string, hosts: readonly string[]): Buffer {
  return Buffer.from(JSON.stringify(["warren-secret", 2, teamId, secretId, hosts]));
}

function parseSealed(sealed: string): {
  version: 1 | 2;
  hosts: readonly string[];
  bytes: Buffer;
} {
  if (sealed.startsWith("v1:")) {
    return { version: 1, hosts: [], bytes: Buffer.from(sealed.slice(3), "base64") };
  }
  const [scheme, hostsText, body, ...rest] = sealed.split(":");
  if (scheme !== "v2" || hostsText === undefined || body === undefined || rest.length > 0) {
    throw new Error("unknown scheme");
  }
  const hosts: unknown = JSON.parse(Buffer.from(hostsText, "base64url").toString("utf8"));
  if (!Array.isArray(hosts) || !hosts.every((h) => typeof h === "string")) {
    throw new Error("bad hosts");
  }
  return { version: 2, hosts, bytes: Buffer.from(body, "base64") };
}
