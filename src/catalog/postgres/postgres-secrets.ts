import type { SecretCatalog, SecretRow } from "../secrets.js";
import type { CatalogPool } from "./pool.js";

interface SecretRecord {
  id: string;
  team_id: string;
  name: string;
  version: number;
  metadata: Record<string, string>;
  sealed: string;
  created_at: Date;
  updated_at: Date;
}

const toSecretRow = (r: SecretRecord): SecretRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  version: Number(r.version),
  metadata: r.metadata,
  sealed: r.sealed,
  createdAt: r.created_at.toISOString(),
  updatedAt: r.updated_at.toISOString(),
});

const SQL = {
  insert: `
    INSERT INTO secrets (id, team_id, name, version, metadata, sealed, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  get: "SELECT * FROM secrets WHERE id = $1",
  find: "SELECT * FROM secrets WHERE team_id = $1 AND name = $2",
  listOfTeam: "SELECT * FROM secrets WHERE team_id = $1 ORDER BY name",
  update: `
    UPDATE secrets SET version = $2, metadata = $3, sealed = $4, updated_at = $5
    WHERE id = $1 RETURNING id`,
  delete: "DELETE FROM secrets WHERE id = $1 RETURNING id",
} as const;

/** Secrets for the whole cluster: any node's sandboxes use them. */
export class PostgresSecrets implements SecretCatalog {
  readonly #db: CatalogPool;

  constructor(db: CatalogPool) {
    this.#db = db;
  }

  async insertSecret(row: SecretRow): Promise<void> {
    await this.#db.query(`insert secret ${row.name}`, SQL.insert, [
      row.id,
      row.teamId,
      row.name,
      row.version,
      JSON.stringify(row.metadata),
      row.sealed,
      row.createdAt,
      row.updatedAt,
    ]);
  }

  async getSecret(id: string): Promise<SecretRow | undefined> {
    const [record] = await this.#db.query<SecretRecord>(`get secret ${id}`, SQL.get, [id]);
    return record && toSecretRow(record);
  }

  async findSecret(teamId: string, name: string): Promise<SecretRow | undefined> {
    const [record] = await this.#db.query<SecretRecord>(`find secret ${name}`, SQL.find, [
      teamId,
      name,
    ]);
    return record && toSecretRow(record);
  }

  async listSecrets(teamId: string): Promise<SecretRow[]> {
    const records = await this.#db.query<SecretRecord>("list secrets", SQL.listOfTeam, [teamId]);
    return records.map(toSecretRow);
  }

  async updateSecret(
    id: string,
    change: Pick<SecretRow, "version" | "metadata" | "sealed" | "updatedAt">,
  ): Promise<boolean> {
    const rows = await this.#db.query(`update secret ${id}`, SQL.update, [
      id,
      change.version,
      JSON.stringify(change.metadata),
      change.sealed,
      change.updatedAt,
    ]);
    return rows.length > 0;
  }

  async deleteSecret(id: string): Promise<boolean> {
    return (await this.#db.query(`delete secret ${id}`, SQL.delete, [id])).length > 0;
  }
}
