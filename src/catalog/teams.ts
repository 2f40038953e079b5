/**
 * Teams and their API keys: who may do what (src/tenancy decides; this only remembers).
 * Every sandbox, template and build row names its team. A key is kept as its SHA-256 only:
 * the value is shown once, when it is made, and never again.
 */

import type { TeamLimits } from "../protocol/index.js";

export { TEAM_LIMIT_KEYS, type TeamLimits } from "../protocol/index.js";

/** The team an install had before teams existed: its key file's keys are this team's. */
export const DEFAULT_TEAM_ID = "default";

export interface TeamRow {
  readonly id: string;
  readonly name: string;
  readonly createdAt: string;
  readonly limits: TeamLimits;
}

/** How a key is shown after it was made (E2B's IdentifierMaskingDetails). */
export interface KeyMask {
  readonly prefix: string;
  readonly valueLength: number;
  readonly maskedValuePrefix: string;
  readonly maskedValueSuffix: string;
}

export interface ApiKeyRow {
  readonly id: string;
  readonly teamId: string;
  readonly name: string;
  /** Hex SHA-256 of the key's full value. */
  readonly hash: string;
  readonly mask: KeyMask;
  readonly createdAt: string;
  readonly lastUsedAt?: string;
}

export interface TeamCatalog {
  /** Inserts, or replaces name and limits of an existing id. */
  putTeam(row: TeamRow): Promise<void>;
  getTeam(id: string): Promise<TeamRow | undefined>;
  /** Ordered by createdAt then id. */
  listTeams(): Promise<TeamRow[]>;
  /** Deletes the team and, at once, every key of it. */
  deleteTeam(id: string): Promise<void>;

  /** already_exists when the hash is taken. */
  insertApiKey(row: ApiKeyRow): Promise<void>;
  findApiKeyByHash(hash: string): Promise<ApiKeyRow | undefined>;
  /** A team's keys, oldest first. */
  listApiKeys(teamId: string): Promise<ApiKeyRow[]>;
  /** Renames or stamps a key; undefined when the team has no such key. */
  updateApiKey(
    teamId: string,
    id: string,
    patch: { readonly name?: string; readonly lastUsedAt?: string },
  ): Promise<ApiKeyRow | undefined>;
  /** False when the team has no such key. */
  deleteApiKey(teamId: string, id: string): Promise<boolean>;
}
