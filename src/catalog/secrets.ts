/**
 * Secrets: named values a team's sandboxes use on the way out (header rules), never
 * returned. The catalog keeps them sealed (src/secrets encrypts; this only stores).
 */

export interface SecretRow {
  /** `sec_` and 32 hex digits. */
  readonly id: string;
  readonly teamId: string;
  /** Lower case, unique within the team. */
  readonly name: string;
  /** 1 for a new secret, +1 per update. */
  readonly version: number;
  readonly metadata: Readonly<Record<string, string>>;
  /** The current version's value, sealed (AES-256-GCM, src/secrets): never the value. */
  readonly sealed: string;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface SecretCatalog {
  /** already_exists when the team has a secret of that name. */
  insertSecret(row: SecretRow): Promise<void>;
  getSecret(id: string): Promise<SecretRow | undefined>;
  findSecret(teamId: string, name: string): Promise<SecretRow | undefined>;
  /** A team's secrets, by name. */
  listSecrets(teamId: string): Promise<SecretRow[]>;
  /** A new version; false when there is no such secret. */
  updateSecret(
    id: string,
    change: Pick<SecretRow, "version" | "metadata" | "sealed" | "updatedAt">,
  ): Promise<boolean>;
  /** False when there was none. */
  deleteSecret(id: string): Promise<boolean>;
}
