import type Database from "better-sqlite3";
import type { SecretCatalog, SecretRow } from "../secrets.js";

interface SecretRecord {
  id: string;
  team_id: string;
  name: string;
  version: number;
  metadata: string;
  sealed: string;
  created_at: string;
  updated_at: string;
}

const toSecretRow = (r: SecretRecord): SecretRow => ({
  id: r.id,
  teamId: r.team_id,
  name: r.name,
  version: r.version,
  metadata: JSON.parse(r.metadata) as Record<string, string>,
  sealed: r.sealed,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

function prepare(db: Database.Database) {
  const q = <R = unknown>(sql: string) =>
    db.prepare<[(Record<string, unknown> | string)?, string?], R>(sql);
  return {
    insert: q(`
      INSERT INTO secrets (id, team_id, name, version, metadata, sealed, created_at, updated_at)
      VALUES (@id, @teamId, @name, @version, @metadata, @sealed, @createdAt, @updatedAt)`),
    get: q<SecretRecord>("SELECT * FROM secrets WHERE id = ?"),
    find: q<SecretRecord>("SELECT * FROM secrets WHERE team_id = ? AND name = ?"),
    listOfTeam: q<SecretRecord>("SELECT * FROM secrets WHERE team_id = ? ORDER BY name"),
    update: q(`
      UPDATE secrets SET version = @version, metadata = @metadata, sealed = @sealed,
        updated_at = @updatedAt WHERE id = @id`),
    delete: q("DELETE FROM secrets WHERE id = ?"),
  };
}

/** Secrets in the node's SQLite file (the catalog's connection). */
export class SqliteSecrets implements SecretCatalog {
  readonly #sql: ReturnType<typeof prepare>;
  readonly #run: <T>(context: string, work: () => T) => Promise<T>;

  constructor(db: Database.Database, run: <T>(context: string, work: () => T) => Promise<T>) {
    this.#sql = prepare(db);
    this.#run = run;
  }

  insertSecret(row: SecretRow): Promise<void> {
    return this.#run(`insert secret ${row.name}`, () => {
      this.#sql.insert.run({ ...row, metadata: JSON.stringify(row.metadata) });
    });
  }

  getSecret(id: string): Promise<SecretRow | undefined> {
    return this.#run(`get secret ${id}`, () => {
      const record = this.#sql.get.get(id);
      return record && toSecretRow(record);
    });
  }

  findSecret(teamId: string, name: string): Promise<SecretRow | undefined> {
    return this.#run(`find secret ${name}`, () => {
      const record = this.#sql.find.get(teamId, name);
      return record && toSecretRow(record);
    });
  }

  listSecrets(teamId: string): Promise<SecretRow[]> {
    return this.#run("list secrets", () => this.#sql.listOfTeam.all(teamId).map(toSecretRow));
  }

  updateSecret(
    id: string,
    change: Pick<SecretRow, "version" | "metadata" | "sealed" | "updatedAt">,
  ): Promise<boolean> {
    return this.#run(
      `update secret ${id}`,
      () =>
        this.#sql.update.run({ id, ...change, metadata: JSON.stringify(change.metadata) }).changes >
        0,
    );
  }

  deleteSecret(id: string): Promise<boolean> {
    return this.#run(`delete secret ${id}`, () => this.#sql.delete.run(id).changes > 0);
  }
}
