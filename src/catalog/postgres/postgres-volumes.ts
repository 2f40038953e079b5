import type { VolumeCatalog, VolumeRow } from "../volumes.js";
import type { CatalogPool } from "./pool.js";

interface VolumeRecord {
  id: string;
  team_id: string;
  name: string;
  token: string;
  created_at: Date;
}

const toVolumeRow = (r: VolumeRecord): VolumeRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  tokenKey: r.token,
  createdAt: r.created_at.toISOString(),
});

const SQL = {
  insert: `
    INSERT INTO volumes (id, team_id, name, token, created_at) VALUES ($1, $2, $3, $4, $5)`,
  get: "SELECT * FROM volumes WHERE id = $1",
  list: "SELECT * FROM volumes ORDER BY created_at, id",
  listOfTeam: "SELECT * FROM volumes WHERE team_id = $1 ORDER BY created_at, id",
  setKey: "UPDATE volumes SET token = $2 WHERE id = $1 RETURNING id",
  delete: "DELETE FROM volumes WHERE id = $1 RETURNING id",
} as const;

/** Volumes for the whole cluster: not scoped to a node (any node mounts any volume). */
export class PostgresVolumes implements VolumeCatalog {
  readonly #db: CatalogPool;

  constructor(db: CatalogPool) {
    this.#db = db;
  }

  async insertVolume(row: VolumeRow): Promise<void> {
    await this.#db.query(`insert volume ${row.name}`, SQL.insert, [
      row.id,
      row.teamId,
      row.name,
      row.tokenKey,
      row.createdAt,
    ]);
  }

  async getVolume(id: string): Promise<VolumeRow | undefined> {
    const [record] = await this.#db.query<VolumeRecord>(`get volume ${id}`, SQL.get, [id]);
    return record && toVolumeRow(record);
  }

  async listVolumes(teamId?: string): Promise<VolumeRow[]> {
    const records =
      teamId === undefined
        ? await this.#db.query<VolumeRecord>("list volumes", SQL.list)
        : await this.#db.query<VolumeRecord>("list volumes", SQL.listOfTeam, [teamId]);
    return records.map(toVolumeRow);
  }

  async setVolumeTokenKey(id: string, tokenKey: string): Promise<boolean> {
    const changed = await this.#db.query(`rotate volume ${id}'s token key`, SQL.setKey, [
      id,
      tokenKey,
    ]);
    return changed.length > 0;
  }

  async deleteVolume(id: string): Promise<boolean> {
    return (await this.#db.query(`delete volume ${id}`, SQL.delete, [id])).length > 0;
  }
}
