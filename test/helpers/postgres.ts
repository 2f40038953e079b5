import { type ChildProcess, execFile, spawn } from "node:child_process";
import { appendFile, chown, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { freeLoopbackPort } from "./free-port.js";

const run = promisify(execFile);

// A real PostgreSQL for the e2e tier: Debian's binaries (package `postgresql`) run as a
// server of the test's own, in a temporary directory holding its data and its socket, on a
// free loopback port. The Debian cluster service is never started or touched: stop() stops
// only the postmaster of this data directory, then removes the directory.

export interface TestPostgres {
  /** Connection string of the `postgres` database, as the superuser `warren` (no password). */
  readonly url: string;
  /** Creates an empty database and returns its connection string. */
  createDatabase(name: string): Promise<string>;
  /** Drops a database made by createDatabase, closing its connections first. */
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
}

const SUPERUSER = "warren";
const START_TIMEOUT_MS = 30_000;
/** The server runs as this user when the tests run as root (PostgreSQL refuses root). */
const SERVER_USER = "postgres";

/** The newest installed major version's bin directory, e.g. /usr/lib/postgresql/15/bin. */
async function binDir(): Promise<string> {
  const versions = await readdir("/usr/lib/postgresql").catch(() => [] as string[]);
  const newest = versions
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a))
    .at(0);
  if (!newest) {
    throw new Error("PostgreSQL is not installed: apt-get install -y postgresql");
  }
  return join("/usr/lib/postgresql", newest, "bin");
}

const DATABASE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export interface PostgresOptions {
  /** Addresses to listen on besides 127.0.0.1 (they must exist when it starts). */
  readonly listen?: readonly string[];
  /** Client blocks (CIDR) let in without a password besides loopback, e.g. other namespaces. */
  readonly trust?: readonly string[];
  /** Server settings over the small defaults below (e.g. max_connections for many nodes). */
  readonly settings?: Readonly<Record<string, string>>;
}

/** Starts a fresh PostgreSQL server; register `after(() => pg.stop())` on the next line. */
export async function startPostgres(options: PostgresOptions = {}): Promise<TestPostgres> {
  const bin = await binDir();
  const dir = await mkdtemp(join(tmpdir(), "warren-pg-"));
  const data = join(dir, "data");
  const asRoot = userInfo().uid === 0;
  // As root, everything runs as `postgres`, which must own the directory it writes in.
  const command = (tool: string): [string, string[]] =>
    asRoot ? ["runuser", ["-u", SERVER_USER, "--", join(bin, tool)]] : [join(bin, tool), []];
  const runTool = async (tool: string, args: string[]) => {
    const [file, prefix] = command(tool);
    await run(file, [...prefix, ...args], { cwd: dir });
  };

  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const stop = async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      // pg_ctl signals the postmaster named in this data directory's postmaster.pid alone.
      await runTool("pg_ctl", ["stop", "-D", data, "-m", "fast", "-w", "-t", "20"]).catch(
        async () => {
          // pg_ctl failed: an immediate shutdown of the same postmaster, by its pid file.
          const pidFile = await readFile(join(data, "postmaster.pid"), "utf8").catch(() => "");
          const pid = Number(pidFile.split("\n")[0]);
          if (Number.isSafeInteger(pid) && pid > 0) process.kill(pid, "SIGQUIT");
          else child?.kill("SIGKILL");
        },
      );
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };

  try {
    if (asRoot) {
      const { stdout } = await run("id", ["-u", SERVER_USER]);
      const { stdout: gid } = await run("id", ["-g", SERVER_USER]);
      await chown(dir, Number(stdout.trim()), Number(gid.trim()));
    }
    await runTool("initdb", [
      "-D",
      data,
      "-U",
      SUPERUSER,
      "--auth=trust",
      "--encoding=UTF8",
      "--locale=C",
      "--no-sync",
    ]);
    if (options.trust?.length) {
      const lines = options.trust.map((cidr) => `host all all ${cidr} trust\n`).join("");
      await appendFile(join(data, "pg_hba.conf"), lines);
    }
    const port = await freeLoopbackPort();
    const [file, prefix] = command("postgres");
    // Durability is not wanted here; a small server costs the host little.
    const settings = Object.entries({
      fsync: "off",
      synchronous_commit: "off",
      full_page_writes: "off",
      autovacuum: "off",
      shared_buffers: "16MB",
      max_connections: "60",
      ...options.settings,
    }).flatMap(([name, value]) => ["-c", `${name}=${value}`]);
    child = spawn(
      file,
      [
        ...prefix,
        ...["-D", data, "-k", dir, "-h", ["127.0.0.1", ...(options.listen ?? [])].join(",")],
        ...["-p", String(port), ...settings],
      ],
      { cwd: dir, stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4000);
    });
    const spawned = child;
    exited = new Promise<void>((resolve) => spawned.once("exit", () => resolve()));

    const base = `postgres://${SUPERUSER}@127.0.0.1:${port}`;
    const url = `${base}/postgres`;
    const admin = async (sql: string) => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(sql);
      } finally {
        await client.end();
      }
    };
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const ready = await admin("SELECT 1").then(
        () => true,
        () => false,
      );
      if (ready) break;
      if (spawned.exitCode !== null || Date.now() > deadline) {
        throw new Error(`PostgreSQL did not start on port ${port}:\n${stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const checked = (name: string) => {
      if (!DATABASE_NAME.test(name)) throw new Error(`bad database name ${name}`);
      return name;
    };
    return {
      url,
      createDatabase: async (name) => {
        await admin(`CREATE DATABASE ${checked(name)}`);
        return `${base}/${name}`;
      },
      dropDatabase: (name) => admin(`DROP DATABASE IF EXISTS ${checked(name)} WITH (FORCE)`),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
