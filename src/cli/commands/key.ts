import { hostname, userInfo } from "node:os";
import type { Command } from "commander";
import { api, asTeam, type Connection } from "../context.js";
import { ApiError, CliError, usage } from "../errors.js";
import { age, printJson, printTable } from "../output.js";
import type { Connect } from "../program.js";

/** E2B's TeamAPIKey: what `GET /api-keys` lists (never the key itself). */
interface TeamApiKey {
  id: string;
  name: string;
  mask: {
    prefix: string;
    valueLength: number;
    maskedValuePrefix: string;
    maskedValueSuffix: string;
  };
  createdAt: string;
  lastUsed: string | null;
}

/** E2B's CreatedTeamAPIKey: the key itself, shown this once. */
interface CreatedApiKey extends TeamApiKey {
  key: string;
}

/**
 * `warren key create|ls|rm`: API keys of the caller's own team (a team key), or with
 * `--team ID` of any team (the admin token).
 */
export function keyCommands(program: Command, connect: Connect): void {
  const key = program.command("key").description("create, list and remove API keys of a team");
  const team = "the team (with the admin token; default: the API key's own)";

  key
    .command("create")
    .description("create an API key (printed this once)")
    .option("--name <name>", "what it is for, shown by key ls (default: user@host)")
    .option("--team <id>", team)
    .option("--json", "print it as JSON (E2B's CreatedTeamAPIKey: the key in .key)")
    .action(async (opts, cmd: Command) => {
      const { connection, path } = keysOf(connect, cmd, opts.team);
      const created = await api<CreatedApiKey>(connection, "POST", path, {
        name: opts.name ?? defaultName(),
      });
      if (opts.json) return printJson(created);
      printTable(["ID", "NAME", "API KEY"], [[created.id, created.name, created.key]]);
      process.stdout.write("The API key is shown this once: keep it now.\n");
    });

  key
    .command("ls")
    .alias("list")
    .description("list API keys (masked)")
    .option("--team <id>", team)
    .option("--json", "print them as JSON")
    .action(async (opts, cmd: Command) => {
      // No admin route lists keys: the admin reads the team's own, acting as it.
      const { connection } = keysOf(connect, cmd, opts.team);
      const target = opts.team === undefined ? connection : asTeam(connection, opts.team);
      const keys = await api<TeamApiKey[]>(target, "GET", "/api-keys");
      if (opts.json) return printJson(keys);
      printTable(
        ["ID", "NAME", "KEY", "CREATED", "LAST USED"],
        keys.map((k) => [
          k.id,
          k.name,
          masked(k.mask),
          `${age(new Date(k.createdAt))} ago`,
          k.lastUsed === null ? "never" : `${age(new Date(k.lastUsed))} ago`,
        ]),
      );
    });

  key
    .command("rm <id...>")
    .alias("delete")
    .description("remove API keys: refused from the next request on")
    .option("--team <id>", team)
    .action(async (ids: string[], opts, cmd: Command) => {
      const { connection, path } = keysOf(connect, cmd, opts.team);
      for (const id of ids) {
        await api(connection, "DELETE", `${path}/${encodeURIComponent(id)}`).catch(
          (err: unknown) => {
            if (err instanceof ApiError) throw new CliError(`key ${id}: ${err.detail}`);
            throw err;
          },
        );
      }
    });
}

/**
 * The connection and the keys' route: with `--team`, the admin token and that team's admin
 * route; without, the caller's own team, which only a team key has (the admin token spans
 * every team, so it must name one).
 */
function keysOf(
  connect: Connect,
  cmd: Command,
  teamID: string | undefined,
): { connection: Connection; path: string } {
  if (teamID !== undefined) {
    if (teamID.trim() === "") throw usage("--team needs a team id (warren team ls)");
    return {
      connection: connect(cmd, "admin"),
      path: `/admin/teams/${encodeURIComponent(teamID)}/api-keys`,
    };
  }
  const connection = connect(cmd);
  if (connection.credential.kind === "adminToken") {
    throw usage(
      `with the admin token (${connection.credential.source}), name the team: --team ID (warren team ls), or pass the team's --api-key`,
    );
  }
  return { connection, path: "/api-keys" };
}

/** `e2b_…a1b2` from the mask: enough to tell keys apart, never the key. */
function masked(mask: TeamApiKey["mask"]): string {
  return `${mask.prefix}${mask.maskedValuePrefix}…${mask.maskedValueSuffix}`;
}

function defaultName(): string {
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    // no passwd entry for this uid (a container's)
    return hostname();
  }
}
