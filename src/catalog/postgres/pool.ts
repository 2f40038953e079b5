import pg from "pg";
import { toWarrenError, WarrenError } from "../../shared/index.js";
import { AdmissionRefused } from "../team-admission.js";
import { migrate } from "./migrations.js";

export interface PoolOptions {
  /** A libpq-style URL, e.g. "postgres://warren:secret@db.internal:5432/warren". */
  readonly connectionString: string;
  /** Connections kept at most (default 10); callers beyond it queue. */
  readonly maxConnections?: number;
  /** A connection not made within this is `unavailable` (default 10 000). */
  readonly connectTimeoutMs?: number;
  /** A statement running longer is cancelled, `unavailable` (default 30 000). */
  readonly statementTimeoutMs?: number;
}

/** Anything a query can take: pg turns JS arrays into SQL arrays, so JSON goes as text. */
export type Param = string | number | boolean | null | readonly string[];

/**
 * A bounded pg Pool, migrated at open, shared by the methods of one PostgresCatalog or
 * PostgresCluster. Every failure leaves it as a WarrenError naming what was being done.
 */
export class CatalogPool {
  readonly #pool: pg.Pool;
  /** Where the database is, without credentials: for messages. */
  readonly where: string;
  #closed = false;

  private constructor(pool: pg.Pool, where: string) {
    this.#pool = pool;
    this.where = where;
  }

  static async open(options: PoolOptions): Promise<CatalogPool> {
    const where = describe(options.connectionString);
    const pool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.maxConnections ?? 10,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 10_000,
      idleTimeoutMillis: 30_000,
      statement_timeout: options.statementTimeoutMs ?? 30_000,
      application_name: "warren",
    });
    // An idle connection that drops emits here; the pool discards it and the next query
    // opens another (or reports the failure). Without a listener it would crash the process.
    pool.on("error", () => {});
    const opened = new CatalogPool(pool, where);
    try {
      await opened.withClient(`migrate catalog ${where}`, (client) => migrate(client, where));
      return opened;
    } catch (err) {
      await opened.close();
      throw err;
    }
  }

  /** One statement on any pooled connection; returns its rows. */
  async query<R extends pg.QueryResultRow>(
    context: string,
    sql: string,
    params: readonly Param[] = [],
  ): Promise<R[]> {
    return this.#run(context, async () => (await this.#pool.query<R>(sql, [...params])).rows);
  }

  /** Runs `work` in one transaction on one connection: committed if it returns, else rolled back. */
  transaction<T>(context: string, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.withClient(context, async (client) => {
      await client.query("BEGIN");
      try {
        const result = await work(client);
        await client.query("COMMIT");
        return result;
      } catch (err) {
        await client.query("ROLLBACK").catch(() => {});
        throw err;
      }
    });
  }

  /** Runs `work` on one connection of its own, returned to the pool after (destroyed if broken). */
  withClient<T>(context: string, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.#run(context, async () => {
      const client = await this.#pool.connect();
      let broken: Error | undefined;
      try {
        return await work(client);
      } catch (err) {
        // A connection-level failure: do not hand this client out again.
        if (isUnavailable(err)) broken = err instanceof Error ? err : new Error(String(err));
        throw err;
      } finally {
        client.release(broken);
      }
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.end();
  }

  async #run<T>(context: string, work: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new WarrenError("unavailable", `${context}: the catalog is closed`);
    try {
      return await work();
    } catch (err) {
      throw toCatalogError(err, context);
    }
  }
}

/** Runs a statement inside a transaction's client, rows only. */
export async function rowsOf<R extends pg.QueryResultRow>(
  client: pg.ClientBase,
  sql: string,
  params: readonly Param[] = [],
): Promise<R[]> {
  return (await client.query<R>(sql, [...params])).rows;
}

/** "host:port/database" of a connection string: never its user or password. */
function describe(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    return `${url.hostname || "localhost"}:${url.port || "5432"}${url.pathname}`;
  } catch {
    return "(unparsable connection string)";
  }
}

/** SQLSTATE classes and codes that mean "try again later", not "your request is wrong". */
const UNAVAILABLE_STATES = new Set(["57P01", "57P02", "57P03", "53300", "40001", "40P01", "57014"]);
const UNAVAILABLE_ERRNOS = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);
/** pg reports a dropped connection or a pool timeout as a plain Error with no code. */
const UNAVAILABLE_MESSAGES =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection closed/i;

function isUnavailable(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code === "string") {
    return code.startsWith("08") || UNAVAILABLE_STATES.has(code) || UNAVAILABLE_ERRNOS.has(code);
  }
  return err instanceof Error && UNAVAILABLE_MESSAGES.test(err.message);
}

function toCatalogError(err: unknown, context: string): WarrenError {
  if (err instanceof AdmissionRefused) return toWarrenError(err.refusal, context);
  if (err instanceof WarrenError) {
    return new WarrenError(err.reason, `${context}: ${err.message}`, { cause: err });
  }
  const code = (err as { code?: unknown } | undefined)?.code;
  const message = `${context}: ${err instanceof Error ? err.message : String(err)}`;
  if (code === "23505") return new WarrenError("already_exists", message, { cause: err });
  if (isUnavailable(err)) return new WarrenError("unavailable", message, { cause: err });
  if (code === "53100") return new WarrenError("insufficient_storage", message, { cause: err });
  // Class 22, data exceptions: a malformed timestamp, a value out of range.
  if (typeof code === "string" && code.startsWith("22")) {
    return new WarrenError("invalid_argument", message, { cause: err });
  }
  return toWarrenError(err, context);
}
