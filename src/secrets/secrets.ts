import { randomBytes } from "node:crypto";
import type { SecretCatalog, SecretRow } from "../catalog/index.js";
import {
  coversPattern,
  type DomainPattern,
  matchesDomain,
  parseDomainPattern,
} from "../shared/domain-patterns.js";
import { WarrenError } from "../shared/index.js";
import { SecretBox } from "./secret-box.js";

/** Lower case letters, digits, `-`, `_`, `.`: what `${e2b.secrets.NAME}` can carry. */
const NAME = /^[a-z0-9][a-z0-9._-]{0,127}$/;
const MAX_VALUE_BYTES = 64 * 1024;
const MAX_METADATA_ENTRIES = 32;
const MAX_METADATA_KEY_BYTES = 128;
const MAX_METADATA_VALUE_BYTES = 1024;
const MAX_METADATA_BYTES = 8192;
const MAX_ALLOWED_HOSTS = 32;

/** What every read of a secret answers: never its value. */
export interface SecretInfo {
  readonly secretID: string;
  readonly name: string;
  readonly currentVersion: number;
  readonly metadata: Readonly<Record<string, string>>;
  /**
   * Warren's own (E2B has none, so its SDKs never send it): the hosts a rule may send the
   * value to, bound when the secret is made. Absent: unbound, any host a rule names (E2B's).
   */
  readonly allowedHosts?: readonly string[];
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface SecretsOptions {
  readonly catalog: SecretCatalog;
  readonly box: SecretBox;
}

/**
 * A team's secrets (E2B's `/secrets`): values are write-only — sealed before they reach the
 * catalog (SecretBox), never in an answer, an error or a log line — and read back only by
 * `valueOf`, for the egress path that adds them to requests on the way out.
 */
export class Secrets {
  readonly #o: SecretsOptions;

  constructor(options: SecretsOptions) {
    this.#o = options;
  }

  async create(
    teamId: string,
    input: { name?: unknown; value?: unknown; metadata?: unknown; allowedHosts?: unknown },
  ): Promise<SecretInfo> {
    const name = checkName(input.name);
    const value = checkValue(input.value);
    const metadata = checkMetadata(input.metadata);
    const hosts = checkAllowedHosts(input.allowedHosts);
    const id = `sec_${randomBytes(16).toString("hex")}`;
    const now = new Date().toISOString();
    const row: SecretRow = {
      id,
      teamId,
      name,
      version: 1,
      metadata,
      sealed: this.#o.box.seal({ teamId, secretId: id, hosts }, value),
      createdAt: now,
      updatedAt: now,
    };
    try {
      await this.#o.catalog.insertSecret(row);
    } catch (err) {
      if (err instanceof WarrenError && err.reason === "already_exists") {
        throw new WarrenError("already_exists", `the team already has a secret named '${name}'`);
      }
      throw err;
    }
    return infoOf(row);
  }

  /** A new version of its value (and its metadata, when given). */
  async update(
    teamId: string,
    idOrName: string,
    input: { value?: unknown; metadata?: unknown; allowedHosts?: unknown },
  ): Promise<SecretInfo> {
    if (input.allowedHosts !== undefined) {
      throw new WarrenError(
        "invalid_argument",
        "body/allowedHosts is set when a secret is created and never changes: create another secret for other hosts",
      );
    }
    const row = await this.#find(teamId, idOrName);
    const value = checkValue(input.value);
    const hosts = SecretBox.hostsOf(row.sealed);
    const change = {
      version: row.version + 1,
      metadata: input.metadata === undefined ? row.metadata : checkMetadata(input.metadata),
      sealed: this.#o.box.seal({ teamId, secretId: row.id, hosts }, value),
      updatedAt: new Date().toISOString(),
    };
    if (!(await this.#o.catalog.updateSecret(row.id, change))) throw notFound(idOrName);
    return infoOf({ ...row, ...change });
  }

  async get(teamId: string, idOrName: string): Promise<SecretInfo> {
    return infoOf(await this.#find(teamId, idOrName));
  }

  async list(teamId: string): Promise<SecretInfo[]> {
    return (await this.#o.catalog.listSecrets(teamId)).map(infoOf);
  }

  async destroy(teamId: string, idOrName: string): Promise<void> {
    const row = await this.#find(teamId, idOrName);
    if (!(await this.#o.catalog.deleteSecret(row.id))) throw notFound(idOrName);
  }

  /**
   * The current value of the team's secret of that name (egress only), to be sent to `host`:
   * refused (`secret_host_refused`) for a host a bound secret's `allowedHosts` do not cover.
   */
  async valueOf(teamId: string, name: string, host: string): Promise<string> {
    const row = await this.#o.catalog.findSecret(teamId, name.toLowerCase());
    if (!row) throw notFound(name);
    const hosts = SecretBox.hostsOf(row.sealed);
    if (hosts.length > 0 && !matchesDomain(host, patternsOf(hosts))) {
      throw new WarrenError(
        "secret_host_refused",
        `secret "${row.name}" may be sent to ${hosts.join(", ")} only, not ${host}`,
      );
    }
    return this.#o.box.open({ teamId, secretId: row.id }, row.sealed);
  }

  /**
   * Whether a rule for `domain` (a name or `*.name`) may send the team's secret `name`: true
   * unless the secret is bound and its hosts do not cover every name the domain matches. A
   * secret the team lacks passes here (E2B's: the request then fails at egress).
   */
  async mayBeSentTo(teamId: string, name: string, domain: string): Promise<boolean> {
    const row = await this.#o.catalog.findSecret(teamId, name.toLowerCase());
    const hosts = row ? SecretBox.hostsOf(row.sealed) : [];
    const pattern = parseDomainPattern(domain);
    if (hosts.length === 0) return true;
    return pattern !== undefined && patternsOf(hosts).some((h) => coversPattern(h, pattern));
  }

  /** By id (`sec_…`) or by name; another team's reads as missing. */
  async #find(teamId: string, idOrName: string): Promise<SecretRow> {
    const row = idOrName.startsWith("sec_")
      ? await this.#o.catalog.getSecret(idOrName)
      : await this.#o.catalog.findSecret(teamId, idOrName.toLowerCase());
    if (!row || row.teamId !== teamId) throw notFound(idOrName);
    return row;
  }
}

function infoOf(row: SecretRow): SecretInfo {
  const hosts = SecretBox.hostsOf(row.sealed);
  return {
    secretID: row.id,
    name: row.name,
    currentVersion: row.version,
    metadata: { ...row.metadata },
    ...(hosts.length > 0 && { allowedHosts: [...hosts] }),
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** `allowedHosts` as given at create: names and `*.name`s, normalized, at most 32; none: unbound. */
function checkAllowedHosts(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_ALLOWED_HOSTS) {
    throw new WarrenError(
      "invalid_argument",
      `body/allowedHosts must be a list of 1 to ${MAX_ALLOWED_HOSTS} host names ('api.example.com', '*.example.com')`,
    );
  }
  const entries = value.map((entry, i) => {
    const pattern = typeof entry === "string" ? parseDomainPattern(entry) : undefined;
    if (!pattern) {
      throw new WarrenError(
        "invalid_argument",
        `body/allowedHosts/${i} must be a host name or *.name (no address, no bare '*')`,
      );
    }
    return pattern.entry;
  });
  return [...new Set(entries)];
}

function patternsOf(hosts: readonly string[]): DomainPattern[] {
  return hosts.flatMap((host) => parseDomainPattern(host) ?? []);
}

function checkName(value: unknown): string {
  const name = typeof value === "string" ? value.toLowerCase() : "";
  if (!NAME.test(name) || name.startsWith("sec_")) {
    throw new WarrenError(
      "invalid_argument",
      "body/name must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit, not 'sec_' (kept for ids)",
    );
  }
  return name;
}

/** The message never quotes the value: it is the secret. */
function checkValue(value: unknown): string {
  if (typeof value !== "string" || value.length === 0) {
    throw new WarrenError("invalid_argument", "body/value must be a non-empty string");
  }
  if (Buffer.byteLength(value) > MAX_VALUE_BYTES || value.includes("\0")) {
    throw new WarrenError(
      "invalid_argument",
      `body/value must be at most ${MAX_VALUE_BYTES} bytes, without NUL`,
    );
  }
  return value;
}

function checkMetadata(value: unknown): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new WarrenError("invalid_argument", "body/metadata must be an object of strings");
  }
  const entries = Object.entries(value);
  let total = 0;
  for (const [key, v] of entries) {
    if (typeof v !== "string") {
      throw new WarrenError("invalid_argument", `body/metadata/${key} must be a string`);
    }
    if (
      Buffer.byteLength(key) > MAX_METADATA_KEY_BYTES ||
      Buffer.byteLength(v) > MAX_METADATA_VALUE_BYTES
    ) {
      throw new WarrenError(
        "invalid_argument",
        `body/metadata keys are at most ${MAX_METADATA_KEY_BYTES} bytes, values ${MAX_METADATA_VALUE_BYTES}`,
      );
    }
    total += Buffer.byteLength(key) + Buffer.byteLength(v);
  }
  if (entries.length > MAX_METADATA_ENTRIES || total > MAX_METADATA_BYTES) {
    throw new WarrenError(
      "invalid_argument",
      `body/metadata holds at most ${MAX_METADATA_ENTRIES} entries and ${MAX_METADATA_BYTES} bytes`,
    );
  }
  return Object.fromEntries(entries) as Record<string, string>;
}

function notFound(idOrName: string): WarrenError {
  const shown = JSON.stringify(idOrName.length > 64 ? `${idOrName.slice(0, 64)}…` : idOrName);
  return new WarrenError("not_found", `secret ${shown} not found`);
}
