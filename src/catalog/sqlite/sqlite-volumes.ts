import type Database from "better-sqlite3";
import type { VolumeCatalog, VolumeRow } from "../volumes.js";

interface VolumeRecord {
  id: string;
  team_id: string;
  name: string;
  token: string;
  created_at: string;
}

const toVolumeRow = (r: VolumeRecord): VolumeRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  tokenKey: r.token,
  createdAt: r.created_at,
});

function prepare(db: Database.Database) {
  const q = <R = unknown>(sql: string) => db.prepare<[(Record<string, unknown> | string)?], R>(sql);
  return {
    insert: q(`
      INSERT INTO volumes (id, team_id, name, token, created_at)
      VALUES (@id, @teamId, @name, @tokenKey, @createdAt)`),
    setKey: q("UPDATE volumes SET token = @tokenKey WHERE id = @id"),
    get: q<VolumeRecord>("SELECT * FROM volumes WHERE id = ?"),
    list: q<VolumeRecord>("SELECT * FROM volumes ORDER BY created_at, id"),
    listOfTeam: q<VolumeRecord>("SELECT * FROM volumes WHERE team_id = ? ORDER BY created_at, id"),
    delete: q("DELETE FROM volumes WHERE id = ?"),
  };
}

/** Volumes in the node's SQLite file (the catalog's connection). */
export class SqliteVolumes implements VolumeCatalog {
  readonly #sql: ReturnType<typeof prepare>;
  readonly #run: <T>(context: string, work: () => T) => Promise<T>;

  constructor(db: Database.Database, run: <T>(context: string, work: () => T) => Promise<T>) {
    this.#sql = prepare(db);
    this.#run = run;
  }

  insertVolume(row: VolumeRow): Promise<void> {
    return this.#run(`insert volume ${row.name}`, () => {
      this.#sql.insert.run({ ...row });
    });
  }

  setVolumeTokenKey(id: string, tokenKey: string): Promise<boolean> {
    return this.#run(`rotate volume ${id}'s token key`, () => {
      return this.#sql.setKey.run({ id, tokenKey }).changes > 0;
    });
  }

  getVolume(id: string): Promise<VolumeRow | undefined> {
    return this.#run(`get volume ${id}`, () => {
      const record = this.#sql.get.get(id);
      return record && toVolumeRow(record);
    });
  }

  listVolumes(teamId?: string): Promise<VolumeRow[]> {
    return this.#run("list volumes", () =>
      (teamId === undefined ? this.#sql.list.all() : this.#sql.listOfTeam.all(teamId)).map(
        toVolumeRow,
      ),
    );
  }

  deleteVolume(id: string): Promise<boolean> {
    return this.#run(`delete volume ${id}`, () => this.#sql.delete.run(id).changes > 0);
  }
}
