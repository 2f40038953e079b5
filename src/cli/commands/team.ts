import type { Command } from "commander";
import type { TeamLimits, TeamView } from "../../protocol/teams-view.js";
import { api } from "../context.js";
import { ApiError, CliError, usage } from "../errors.js";
import { age, printJson, printTable } from "../output.js";
import type { Connect } from "../program.js";

/** A team's quotas, and a team as `GET /admin/teams` answers (protocol's shapes). */
export type TeamSummary = TeamView;

/** What `POST /admin/teams` answers: the team and its first key, shown this once. */
interface CreatedTeam {
  teamID: string;
  name: string;
  apiKey: string;
  apiKeyID: string;
}

const MIB = 1024 * 1024;

/** `warren team create|ls|rm`: the node's teams, with the admin token. */
export function teamCommands(program: Command, connect: Connect): void {
  const team = program
    .command("team")
    .description("create, list and remove teams, with their quotas (the admin token)");

  team
    .command("create <name>")
    .description("create a team and its first API key (printed this once)")
    .option("--max-sandboxes <n>", "running and paused sandboxes at once")
    .option("--max-vcpus <n>", "vCPUs of its sandboxes together")
    .option("--max-memory-mib <n>", "guest memory of its sandboxes together, MiB")
    .option("--max-disk-gib <n>", "disk of its sandboxes together, GiB")
    .option("--max-builds <n>", "template builds in flight")
    .option("--max-upload-mib <n>", "bytes of uploaded build files, MiB")
    .option("--max-volume-mib <n>", "disk of its volumes together, MiB")
    .option("--json", 'print {"teamID", "apiKey"} only')
    .action(async (name: string, opts, cmd: Command) => {
      const limits = limitsFrom(opts);
      const connection = connect(cmd, "admin");
      const created = await api<CreatedTeam>(connection, "POST", "/admin/teams", {
        name,
        limits,
      });
      if (opts.json) return printJson({ teamID: created.teamID, apiKey: created.apiKey });
      printTable(["TEAM", "NAME", "API KEY"], [[created.teamID, created.name, created.apiKey]]);
      process.stdout.write(
        `The API key is shown this once: keep it now (warren key create --team ${created.teamID} makes another).\n`,
      );
    });

  team
    .command("ls")
    .alias("list")
    .description("list teams: their quotas and what they use now (- is no limit)")
    .option("--json", "print them as JSON")
    .action(async (opts, cmd: Command) => {
      const teams = await api<TeamSummary[]>(connect(cmd, "admin"), "GET", "/admin/teams");
      if (opts.json) return printJson(teams);
      printTeams(teams);
    });

  team
    .command("rm <id>")
    .alias("delete")
    .description("remove a team and its keys (refused while it has sandboxes, unless --force)")
    .option("--force", "kill its running and paused sandboxes first")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd, "admin");
      const query = opts.force ? "?force=true" : "";
      await api(connection, "DELETE", `/admin/teams/${encodeURIComponent(id)}${query}`).catch(
        (err: unknown) => {
          if (err instanceof ApiError && err.status === 409) {
            throw new CliError(
              `team ${id}: ${err.detail} (warren team rm ${id} --force kills its sandboxes and removes it)`,
            );
          }
          if (err instanceof ApiError) throw new CliError(`team ${id}: ${err.detail}`);
          throw err;
        },
      );
    });
}

/** The limits the options name (each a whole number ≥ 0); the rest stay unlimited. */
export function limitsFrom(opts: Record<string, unknown>): TeamLimits {
  const count = (flag: string, value: unknown): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (typeof value !== "string" || !/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n))
      throw usage(`--${flag} ${String(value)} is not a whole number ≥ 0`);
    return n;
  };
  const upload = count("max-upload-mib", opts.maxUploadMib);
  const volumes = count("max-volume-mib", opts.maxVolumeMib);
  const limits: TeamLimits = {
    maxSandboxes: count("max-sandboxes", opts.maxSandboxes),
    maxVcpus: count("max-vcpus", opts.maxVcpus),
    maxMemoryMiB: count("max-memory-mib", opts.maxMemoryMib),
    maxDiskGiB: count("max-disk-gib", opts.maxDiskGib),
    maxBuilds: count("max-builds", opts.maxBuilds),
    maxUploadBytes: upload === undefined ? undefined : upload * MIB,
    maxVolumeBytes: volumes === undefined ? undefined : volumes * MIB,
  };
  // Absent, not undefined: the body names only the limits set.
  return Object.fromEntries(
    Object.entries(limits).filter(([, value]) => value !== undefined),
  ) as TeamLimits;
}

function printTeams(teams: readonly TeamSummary[]): void {
  const of = (used: string, limit: number | undefined, unit = "") =>
    `${used}${unit}/${limit === undefined ? "-" : `${limit}${unit}`}`;
  printTable(
    ["ID", "NAME", "SANDBOXES", "VCPUS", "MEMORY", "DISK", "BUILDS", "UPLOADS", "VOLUMES", "AGE"],
    teams.map((t) => [
      t.teamID,
      t.name,
      of(String(t.usage.sandboxes), t.limits.maxSandboxes),
      of(String(t.usage.vcpus), t.limits.maxVcpus),
      of(String(t.usage.memoryMiB), t.limits.maxMemoryMiB, "Mi"),
      of(gibibytes(t.usage.diskMiB), t.limits.maxDiskGiB, "Gi"),
      t.limits.maxBuilds === undefined ? "-" : String(t.limits.maxBuilds),
      t.limits.maxUploadBytes === undefined
        ? "-"
        : `${Math.floor(t.limits.maxUploadBytes / MIB)}Mi`,
      t.limits.maxVolumeBytes === undefined
        ? "-"
        : `${Math.floor(t.limits.maxVolumeBytes / MIB)}Mi`,
      age(new Date(t.createdAt)),
    ]),
  );
}

/** MiB as GiB, to a tenth where it is not whole. */
function gibibytes(mib: number): string {
  const gib = mib / 1024;
  return Number.isInteger(gib) ? String(gib) : gib.toFixed(1);
}
