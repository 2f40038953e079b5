import type { Command } from "commander";
import type { SandboxInfo } from "e2b";
import { api, type Connection } from "../context.js";
import { CliError } from "../errors.js";
import { age, parseDuration, parsePairs, printJson, printTable, repeatable } from "../output.js";
import type { Connect } from "../program.js";
import { loadSdk } from "../sdk.js";

interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  fields?: { source?: string };
}

/** `warren sandbox create|ls|info|pause|resume|kill|logs`. */
export function sandboxCommands(program: Command, connect: Connect): void {
  const sandbox = program.command("sandbox").description("create, list, inspect and end sandboxes");

  sandbox
    .command("create [template]")
    .description("create a sandbox (template default: base) and print its id")
    .option("-t, --timeout <duration>", "how long it lives without a connect (e.g. 5m, 1h)", "5m")
    .option("-m, --metadata <key=value>", "metadata, repeatable", repeatable)
    .option("--json", "print the sandbox as JSON")
    .action(async (template: string | undefined, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      const created = await Sandbox.create(template ?? "base", {
        timeoutMs: parseDuration(opts.timeout),
        metadata: parsePairs(opts.metadata, "--metadata"),
      });
      if (opts.json) printJson(await Sandbox.getInfo(created.sandboxId));
      else process.stdout.write(`${created.sandboxId}\n`);
    });

  sandbox
    .command("ls")
    .alias("list")
    .description("list running and paused sandboxes, oldest first")
    .option("-s, --state <states>", "running, paused or both (comma-separated)", "running,paused")
    .option("-m, --metadata <key=value>", "only those with this metadata, repeatable", repeatable)
    .option("--json", "print them as JSON")
    .action(async (opts, cmd: Command) => {
      const connection = connect(cmd);
      const list = await listSandboxes(
        connection,
        opts.state,
        parsePairs(opts.metadata, "--metadata"),
      );
      if (opts.json) printJson(list);
      else printSandboxes(list);
    });

  sandbox
    .command("info <id>")
    .description("show one sandbox")
    .option("--json", "print it as JSON")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      const info = await Sandbox.getInfo(id);
      if (opts.json) printJson(info);
      else printSandbox(info);
    });

  sandbox
    .command("pause <id>")
    .description("pause a running sandbox (its memory and disk kept)")
    .option("--no-memory", "keep the filesystem only: the resume boots afresh")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      const paused = await Sandbox.pause(id, { keepMemory: opts.memory });
      if (!paused) throw new CliError(`sandbox ${id} is already paused`);
    });

  sandbox
    .command("resume <id>")
    .description("resume a paused sandbox (or extend a running one's timeout)")
    .option("-t, --timeout <duration>", "how long it lives from now", "5m")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      await Sandbox.connect(id, { timeoutMs: parseDuration(opts.timeout) });
    });

  sandbox
    .command("kill <id...>")
    .alias("rm")
    .description("kill sandboxes (their files and snapshots go)")
    .action(async (ids: string[], _opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      for (const id of ids) {
        if (!(await Sandbox.kill(id))) throw new CliError(`sandbox ${id} not found`);
      }
    });

  sandbox
    .command("logs <id>")
    .description("print a sandbox's logs: lifecycle events, envd's lines, the guest console")
    .option("-f, --follow", "keep printing new lines until interrupted")
    .action(async (id: string, opts, cmd: Command) => {
      await printLogs(connect(cmd), id, opts.follow === true);
    });
}

function printSandboxes(list: readonly SandboxInfo[]): void {
  printTable(
    ["ID", "TEMPLATE", "STATE", "AGE", "CPU", "MEMORY", "METADATA"],
    list.map((s) => [
      s.sandboxId,
      s.name ?? s.templateId,
      s.state,
      age(s.startedAt),
      String(s.cpuCount),
      `${s.memoryMB}Mi`,
      Object.entries(s.metadata)
        .map(([k, v]) => `${k}=${v}`)
        .join(","),
    ]),
  );
}

function printSandbox(info: SandboxInfo): void {
  printTable(
    ["FIELD", "VALUE"],
    [
      ["id", info.sandboxId],
      ["template", `${info.name ?? ""} (${info.templateId})`],
      ["state", info.state],
      ["started", `${info.startedAt.toISOString()} (${age(info.startedAt)} ago)`],
      ["ends", info.endAt.toISOString()],
      ["vcpus", String(info.cpuCount)],
      ["memory", `${info.memoryMB} MiB`],
      ["metadata", JSON.stringify(info.metadata)],
    ],
  );
}

/** The sandbox's log lines; with `follow`, new ones every second until interrupted. */
async function printLogs(connection: Connection, id: string, follow: boolean): Promise<void> {
  let since = 0;
  const seen = new Set<string>();
  for (;;) {
    for (const entry of await logsSince(connection, id, since)) {
      const key = `${entry.timestamp} ${entry.message}`;
      if (seen.has(key)) continue;
      seen.add(key);
      since = Math.max(since, Date.parse(entry.timestamp));
      const source = entry.fields?.source ?? "";
      process.stdout.write(
        `${entry.timestamp} ${entry.level.padEnd(5)} ${source.padEnd(9)} ${entry.message}\n`,
      );
    }
    if (!follow) return;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}

/** Every sandbox of those states matching the metadata, oldest first. */
export async function listSandboxes(
  connection: Connection,
  states: string,
  metadata: Record<string, string>,
): Promise<SandboxInfo[]> {
  const state = states.split(",").map((s) => s.trim()) as ("running" | "paused")[];
  for (const s of state) {
    if (s !== "running" && s !== "paused")
      throw new CliError(`--state ${s} is neither running nor paused`, 2);
  }
  const { Sandbox } = await loadSdk(connection);
  const paginator = Sandbox.list({ query: { state, metadata } });
  const all: SandboxInfo[] = [];
  while (paginator.hasNext) all.push(...(await paginator.nextItems()));
  return all.sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
}

async function logsSince(connection: Connection, id: string, since: number): Promise<LogEntry[]> {
  const query = since > 0 ? `?start=${since}` : "";
  const logs = await api<{ logEntries: LogEntry[] }>(
    connection,
    "GET",
    `/sandboxes/${encodeURIComponent(id)}/logs${query}`,
  );
  return logs.logEntries;
}
