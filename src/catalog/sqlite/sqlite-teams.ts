import type Database from "better-sqlite3";
import { WarrenError } from "../../shared/index.js";
import type { ApiKeyRow, TeamCatalog, TeamRow } from "../teams.js";

interface TeamRecord {
  id: string;
  name: string;
  created_at: string;
  limits: string;
}

interface ApiKeyRecord {
  id: string;
  team_id: string;
  name: string;
  hash: string;
  mask: string;
  created_at: string;
  last_used_at: string | null;
}

const toTeamRow = (r: TeamRecord): TeamRow => ({
  id: r.id,
  name: r.name,
  createdAt: r.created_at,
  limits: JSON.parse(r.limits),
});

const toApiKeyRow = (r: ApiKeyRecord): ApiKeyRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  hash: r.hash,
  mask: JSON.parse(r.mask),
  createdAt: r.created_at,
  ...(r.last_used_at !== null && { lastUsedAt: r.last_used_at }),
});

function prepare(db: Database.Database) {
  const q = <R = unknown>(sql: string) => db.prepare<[(Record<string, unknown> | string)?], R>(sql);
  return {
    putTeam: q(`
      INSERT INTO teams (id, name, created_at, limits) VALUES (@id, @name, @createdAt, @limits)
      ON CONFLICT (id) DO UPDATE SET name = excluded.name, limits = excluded.limits`),
    getTeam: q<TeamRecord>("SELECT * FROM teams WHERE id = ?"),
    listTeams: q<TeamRecord>("SELECT * FROM teams ORDER BY created_at, id"),
    deleteTeam: q("DELETE FROM teams WHERE id = ?"),
    insertKey: q(`
      INSERT INTO api_keys (id, team_id, name, hash, mask, created_at, last_used_at)
      VALUES (@id, @teamId, @name, @hash, @mask, @createdAt, @lastUsedAt)`),
    keyByHash: q<ApiKeyRecord>("SELECT * FROM api_keys WHERE hash = ?"),
    keyOfTeam: q<ApiKeyRecord>("SELECT * FROM api_keys WHERE team_id = @teamId AND id = @id"),
    listKeys: q<ApiKeyRecord>("SELECT * FROM api_keys WHERE team_id = ? ORDER BY created_at, id"),
    updateKey: q(`
      UPDATE api_keys SET name = COALESCE(@name, name),
        last_used_at = COALESCE(@lastUsedAt, last_used_at)
      WHERE team_id = @teamId AND id = @id`),
    deleteKey: q("DELETE FROM api_keys WHERE team_id = @teamId AND id = @id"),
  };
}

/**
 * Teams and keys in the node's SQLite file (the same connection as the catalog's, so
 * `foreign_keys=ON` makes a deleted team's keys go in the same statement).
 */
export class SqliteTeams implements TeamCatalog {
  readonly #sql: ReturnType<typeof prepare>;
  readonly #run: <T>(context: string, work: () => T) => Promise<T>;

  constructor(db: Database.Database, run: <T>(context: string, work: () => T) => Promise<T>) {
    this.#sql = prepare(db);
    this.#run = run;
  }

  putTeam(row: TeamRow): Promise<void> {
    return this.#run(`put team ${row.id}`, () => {
      this.#sql.putTeam.run({ ...row, limits: JSON.stringify(row.limits) });
    });
  }

  getTeam(id: string): Promise<TeamRow | undefined> {
    return this.#run(`get team ${id}`, () => {
      const record = this.#sql.getTeam.get(id);
      return record && toTeamRow(record);
    });
  }

  listTeams(): Promise<TeamRow[]> {
    return this.#run("list teams", () => this.#sql.listTeams.all().map(toTeamRow));
  }

  deleteTeam(id: string): Promise<void> {
    return this.#run(`delete team ${id}`, () => {
      this.#sql.deleteTeam.run(id);
    });
  }

  insertApiKey(row: ApiKeyRow): Promise<void> {
    return this.#run(`insert API key ${row.id}`, () => {
      this.#sql.insertKey.run({
        ...row,
        mask: JSON.stringify(row.mask),
        lastUsedAt: row.lastUsedAt ?? null,
      });
    });
  }

  findApiKeyByHash(hash: string): Promise<ApiKeyRow | undefined> {
    return this.#run("find API key", () => {
      const record = this.#sql.keyByHash.get(hash);
      return record && toApiKeyRow(record);
    });
  }

  listApiKeys(teamId: string): Promise<ApiKeyRow[]> {
    return this.#run(`list API keys of ${teamId}`, () =>
      this.#sql.listKeys.all(teamId).map(toApiKeyRow),
    );
  }

  updateApiKey(
    teamId: string,
    id: string,
    patch: { readonly name?: string; readonly lastUsedAt?: string },
  ): Promise<ApiKeyRow | undefined> {
    return this.#run(`update API key ${id}`, () => {
      if (patch.name === "") throw new WarrenError("invalid_argument", "name cannot be empty");
      this.#sql.updateKey.run({
        teamId,
        id,
        name: patch.name ?? null,
        lastUsedAt: patch.lastUsedAt ?? null,
      });
      const record = this.#sql.keyOfTeam.get({ teamId, id });
      return record && toApiKeyRow(record);
    });
  }

  deleteApiKey(teamId: string, id: string): Promise<boolean> {
    return this.#run(`delete API key ${id}`, () => {
      return this.#sql.deleteKey.run({ teamId, id }).changes > 0;
    });
  }
}
