import { WarrenError } from "../../shared/index.js";
import type { ApiKeyRow, TeamCatalog, TeamRow } from "../teams.js";
import type { CatalogPool } from "./pool.js";

interface TeamRecord {
  id: string;
  name: string;
  created_at: Date;
  limits: TeamRow["limits"];
}

interface ApiKeyRecord {
  id: string;
  team_id: string;
  name: string;
  hash: string;
  mask: ApiKeyRow["mask"];
  created_at: Date;
  last_used_at: Date | null;
}

const toTeamRow = (r: TeamRecord): TeamRow => ({
  id: r.id,
  name: r.name,
  createdAt: r.created_at.toISOString(),
  limits: r.limits,
});

const toApiKeyRow = (r: ApiKeyRecord): ApiKeyRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  hash: r.hash,
  mask: r.mask,
  createdAt: r.created_at.toISOString(),
  ...(r.last_used_at !== null && { lastUsedAt: r.last_used_at.toISOString() }),
});

const SQL = {
  putTeam: `
    INSERT INTO teams (id, name, created_at, limits) VALUES ($1, $2, $3, $4::jsonb)
    ON CONFLICT (id) DO UPDATE SET name = excluded.name, limits = excluded.limits`,
  getTeam: "SELECT * FROM teams WHERE id = $1",
  listTeams: "SELECT * FROM teams ORDER BY created_at, id",
  deleteTeam: "DELETE FROM teams WHERE id = $1",
  insertKey: `
    INSERT INTO api_keys (id, team_id, name, hash, mask, created_at, last_used_at)
    VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)`,
  keyByHash: "SELECT * FROM api_keys WHERE hash = $1",
  listKeys: "SELECT * FROM api_keys WHERE team_id = $1 ORDER BY created_at, id",
  updateKey: `
    UPDATE api_keys SET name = COALESCE($3, name), last_used_at = COALESCE($4, last_used_at)
    WHERE team_id = $1 AND id = $2 RETURNING *`,
  deleteKey: "DELETE FROM api_keys WHERE team_id = $1 AND id = $2 RETURNING id",
} as const;

/** Teams and keys for the whole cluster: not scoped to a node (gateways read them too). */
export class PostgresTeams implements TeamCatalog {
  readonly #db: CatalogPool;

  constructor(db: CatalogPool) {
    this.#db = db;
  }

  async putTeam(row: TeamRow): Promise<void> {
    await this.#db.query(`put team ${row.id}`, SQL.putTeam, [
      row.id,
      row.name,
      row.createdAt,
      JSON.stringify(row.limits),
    ]);
  }

  async getTeam(id: string): Promise<TeamRow | undefined> {
    const [record] = await this.#db.query<TeamRecord>(`get team ${id}`, SQL.getTeam, [id]);
    return record && toTeamRow(record);
  }

  async listTeams(): Promise<TeamRow[]> {
    return (await this.#db.query<TeamRecord>("list teams", SQL.listTeams)).map(toTeamRow);
  }

  async deleteTeam(id: string): Promise<void> {
    await this.#db.query(`delete team ${id}`, SQL.deleteTeam, [id]);
  }

  async insertApiKey(row: ApiKeyRow): Promise<void> {
    await this.#db.query(`insert API key ${row.id}`, SQL.insertKey, [
      row.id,
      row.teamId,
      row.name,
      row.hash,
      JSON.stringify(row.mask),
      row.createdAt,
      row.lastUsedAt ?? null,
    ]);
  }

  async findApiKeyByHash(hash: string): Promise<ApiKeyRow | undefined> {
    const [record] = await this.#db.query<ApiKeyRecord>("find API key", SQL.keyByHash, [hash]);
    return record && toApiKeyRow(record);
  }

  async listApiKeys(teamId: string): Promise<ApiKeyRow[]> {
    const records = await this.#db.query<ApiKeyRecord>(`list API keys of ${teamId}`, SQL.listKeys, [
      teamId,
    ]);
    return records.map(toApiKeyRow);
  }

  async updateApiKey(
    teamId: string,
    id: string,
    patch: { readonly name?: string; readonly lastUsedAt?: string },
  ): Promise<ApiKeyRow | undefined> {
    if (patch.name === "") throw new WarrenError("invalid_argument", "name cannot be empty");
    const [record] = await this.#db.query<ApiKeyRecord>(`update API key ${id}`, SQL.updateKey, [
      teamId,
      id,
      patch.name ?? null,
      patch.lastUsedAt ?? null,
    ]);
    return record && toApiKeyRow(record);
  }

  async deleteApiKey(teamId: string, id: string): Promise<boolean> {
    const rows = await this.#db.query(`delete API key ${id}`, SQL.deleteKey, [teamId, id]);
    return rows.length > 0;
  }
}
