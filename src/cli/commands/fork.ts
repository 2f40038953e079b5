import type { Command } from "commander";
import { CliError, usage } from "../errors.js";
import { printJson } from "../output.js";
import type { Connect } from "../program.js";
import { loadSdk } from "../sdk.js";

/** `warren fork`, `warren snapshot`. */
export function forkCommands(program: Command, connect: Connect): void {
  program
    .command("fork <id>")
    .description("clone a sandbox into N children from one capture (it keeps running)")
    .option("-n, --count <n>", "how many children", "1")
    .option("--json", "print each child's id or error as JSON")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const count = Number(opts.count);
      if (!Number.isInteger(count) || count < 1)
        throw usage(`--count ${opts.count} is not a number ≥ 1`);
      const { Sandbox } = await loadSdk(connection);
      const source = await Sandbox.connect(id);
      const results = await source.fork({ count });
      const summary = results.map((r) =>
        r instanceof Error ? { error: r.message } : { sandboxId: r.sandboxId },
      );
      if (opts.json) printJson(summary);
      else
        for (const r of summary)
          process.stdout.write(`${"error" in r ? `error: ${r.error}` : r.sandboxId}\n`);
      const failed = summary.filter((r) => "error" in r).length;
      if (failed > 0) throw new CliError(`${failed} of ${count} children did not start`);
    });

  program
    .command("snapshot <id>")
    .description("a persistent snapshot of a sandbox, usable as a template")
    .option("--name <name>", "the name sandboxes are created from (default: its id)")
    .option("--json", "print the snapshot as JSON")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      const snapshot = await Sandbox.createSnapshot(id, opts.name ? { name: opts.name } : {});
      if (opts.json) printJson(snapshot);
      else process.stdout.write(`${snapshot.snapshotId}\n`);
    });
}
