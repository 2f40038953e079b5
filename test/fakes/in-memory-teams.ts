/**
 * InMemoryTeams: a STAND-IN for the SQLite and PostgreSQL team catalogs in API and gateway
 * unit tests; test/contracts/teams.contract.ts runs against it as against them. It starts,
 * as a migrated catalog does, with the default team.
 */
import {
  type ApiKeyRow,
  DEFAULT_TEAM_ID,
  type TeamCatalog,
  type TeamRow,
} from "../../src/catalog/index.js";
import { WarrenError } from "../../src/shared/index.js";

export class InMemoryTeams implements TeamCatalog {
  readonly #teams = new Map<string, TeamRow>([
    [
      DEFAULT_TEAM_ID,
      { id: DEFAULT_TEAM_ID, name: "default", createdAt: new Date(0).toISOString(), limits: {} },
    ],
  ]);
  readonly #keys = new Map<string, ApiKeyRow>();

  async putTeam(row: TeamRow): Promise<void> {
    const existing = this.#teams.get(row.id);
    this.#teams.set(
      row.id,
      structuredClone({ ...row, createdAt: existing?.createdAt ?? row.createdAt }),
    );
  }

  async getTeam(id: string): Promise<TeamRow | undefined> {
    const row = this.#teams.get(id);
    return row && structuredClone(row);
  }

  async listTeams(): Promise<TeamRow[]> {
    return [...this.#teams.values()]
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
      .map((row) => structuredClone(row));
  }

  async deleteTeam(id: string): Promise<void> {
    this.#teams.delete(id);
    for (const [keyId, key] of this.#keys) if (key.teamId === id) this.#keys.delete(keyId);
  }

  async insertApiKey(row: ApiKeyRow): Promise<void> {
    if (!this.#teams.has(row.teamId)) {
      throw new WarrenError("invalid_argument", `insert API key: no team ${row.teamId}`);
    }
    for (const key of this.#keys.values()) {
      if (key.hash === row.hash || key.id === row.id) {
        throw new WarrenError("already_exists", `insert API key ${row.id}: taken`);
      }
    }
    this.#keys.set(row.id, structuredClone(row));
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRow | undefined> {
    const row = [...this.#keys.values()].find((key) => key.hash === hash);
    return row && structuredClone(row);
  }

  async listApiKeys(teamId: string): Promise<ApiKeyRow[]> {
    return [...this.#keys.values()]
      .filter((key) => key.teamId === teamId)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
      .map((row) => structuredClone(row));
  }

  async updateApiKey(
    teamId: string,
    id: string,
    patch: { readonly name?: string; readonly lastUsedAt?: string },
  ): Promise<ApiKeyRow | undefined> {
    if (patch.name === "") throw new WarrenError("invalid_argument", "name cannot be empty");
    const row = this.#keys.get(id);
    if (row === undefined || row.teamId !== teamId) return undefined;
    const next = {
      ...row,
      ...(patch.name !== undefined && { name: patch.name }),
      ...(patch.lastUsedAt !== undefined && { lastUsedAt: patch.lastUsedAt }),
    };
    this.#keys.set(id, next);
    return structuredClone(next);
  }

  async deleteApiKey(teamId: string, id: string): Promise<boolean> {
    const row = this.#keys.get(id);
    if (row === undefined || row.teamId !== teamId) return false;
    return this.#keys.delete(id);
  }
}
