import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import { api } from "../context.js";
import { CliError, usage } from "../errors.js";
import { age, printJson, printTable, repeatable } from "../output.js";
import type { Connect } from "../program.js";
import { loadSdk } from "../sdk.js";

/** What `GET /templates` answers of each template (E2B's Template). */
interface TemplateSummary {
  templateID: string;
  names: string[];
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  buildCount: number;
  buildStatus: string;
  createdAt: string;
}

/** `warren template build|ls|rm`. */
export function templateCommands(program: Command, connect: Connect): void {
  const template = program.command("template").description("build, list and delete templates");

  template
    .command("build")
    .description("build a template from a Dockerfile, printing its progress and logs")
    .option(
      "-f, --file <path>",
      "the Dockerfile (its directory is the build context)",
      "Dockerfile",
    )
    .requiredOption("--name <name>", "the template's name (sandboxes are created from it)")
    .option("--tag <tag>", "a tag of this build, repeatable (default: default)", repeatable)
    .option("--cpu <n>", "vCPUs of its sandboxes")
    .option("--memory <mib>", "memory of its sandboxes, MiB")
    .option("--no-cache", "run every step again")
    .action(async (opts, cmd: Command) => {
      const connection = connect(cmd);
      const file = resolve(opts.file);
      const dockerfile = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
        throw usage(`cannot read ${opts.file}: ${err.code}`);
      });
      const { Template } = await loadSdk(connection);
      const started = Date.now();
      const built = await Template.build(
        Template({ fileContextPath: dirname(file) }).fromDockerfile(dockerfile),
        opts.name,
        {
          ...(opts.tag && { tags: opts.tag as string[] }),
          ...(opts.cpu && { cpuCount: Number(opts.cpu) }),
          ...(opts.memory && { memoryMB: Number(opts.memory) }),
          skipCache: opts.cache === false,
          onBuildLogs: (entry) => {
            const seconds = ((Date.now() - started) / 1000).toFixed(1).padStart(6);
            process.stderr.write(`[${seconds}s] ${entry.level.padEnd(5)} ${entry.message}\n`);
          },
        },
      );
      process.stdout.write(
        `${built.name}${built.tags.length > 0 ? `:${built.tags.join(",")}` : ""} ${built.templateId}\n`,
      );
    });

  template
    .command("ls")
    .alias("list")
    .description("list templates")
    .option("--json", "print them as JSON")
    .action(async (opts, cmd: Command) => {
      const connection = connect(cmd);
      const templates = await api<TemplateSummary[]>(connection, "GET", "/templates");
      if (opts.json) return printJson(templates);
      printTable(
        ["ID", "NAMES", "STATUS", "BUILDS", "CPU", "MEMORY", "DISK", "AGE"],
        templates.map((t) => [
          t.templateID,
          t.names.join(","),
          t.buildStatus,
          String(t.buildCount),
          String(t.cpuCount),
          `${t.memoryMB}Mi`,
          `${t.diskSizeMB}Mi`,
          age(new Date(t.createdAt)),
        ]),
      );
    });

  template
    .command("rm <template...>")
    .alias("delete")
    .description("delete templates (by id or name) and their builds")
    .action(async (names: string[], _opts, cmd: Command) => {
      const connection = connect(cmd);
      for (const name of names) {
        await api(connection, "DELETE", `/templates/${encodeURIComponent(name)}`).catch(
          (err: unknown) => {
            throw new CliError(
              `template ${name}: ${err instanceof Error ? err.message : String(err)}`,
            );
          },
        );
      }
    });
}
