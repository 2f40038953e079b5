import type { Command } from "commander";
import type { NodeView } from "../../protocol/index.js";
import { api, type Connection } from "../context.js";
import { ApiError } from "../errors.js";
import { age, mebibytes, parseDuration, printTable } from "../output.js";
import type { Connect } from "../program.js";
import { listSandboxes } from "./sandbox.js";

/** `warren top`: a refreshing table of the sandboxes and the node's totals. */
export function topCommand(program: Command, connect: Connect): void {
  program
    .command("top")
    .description("watch sandboxes (state, age, CPU, memory) and the node's totals, refreshed")
    .option("-i, --interval <duration>", "time between refreshes", "2s")
    .option("--once", "print one screen and exit (no clearing: for scripts)")
    .action(async (opts, cmd: Command) => {
      const connection = connect(cmd);
      const intervalMs = parseDuration(opts.interval);
      const interactive = !opts.once && process.stdout.isTTY === true;
      let stop = false;
      const quit = () => {
        stop = true;
      };
      if (interactive && process.stdin.isTTY) {
        process.stdin.setRawMode(true);
        process.stdin.on("data", (key: Buffer) => {
          // q, Ctrl-C, Esc
          if ([0x71, 0x03, 0x1b].includes(key[0] ?? 0)) quit();
        });
      }
      process.once("SIGINT", quit);
      try {
        do {
          const screen = await render(connection);
          if (interactive) process.stdout.write("\x1b[H\x1b[2J");
          screen();
          if (opts.once) break;
          const until = Date.now() + intervalMs;
          while (!stop && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
        } while (!stop);
      } finally {
        if (interactive && process.stdin.isTTY) {
          process.stdin.setRawMode(false);
          process.stdin.pause();
        }
      }
    });
}

/** Reads everything first, so the screen is redrawn at once (no flicker). */
async function render(connection: Connection): Promise<() => void> {
  const [sandboxes, node] = await Promise.all([
    listSandboxes(connection, "running,paused", {}),
    // A team key may not read the node (403 admin_required); a gateway has no node to show.
    api<NodeView>(connection, "GET", "/node").catch((err: unknown) =>
      err instanceof ApiError && err.status === 403 ? ("admin only" as const) : undefined,
    ),
  ]);
  const sampled = new Map(
    typeof node === "object" ? node.sandboxes.map((s) => [s.sandboxId, s]) : [],
  );
  return () => {
    const now = new Date().toISOString().replace("T", " ").slice(0, 19);
    process.stdout.write(`warren top  ${connection.url}  ${now}  (q to quit)\n`);
    if (node === "admin only") {
      process.stdout.write(
        "node  (the node's totals need the admin token: --admin-token, WARREN_ADMIN_TOKEN)\n\n",
      );
    } else if (node) {
      const c = node.capacity;
      process.stdout.write(
        `node  sandboxes ${c.sandboxes}/${c.maxSandboxes}  vCPUs ${c.vcpus}/${c.maxVcpus}  ` +
          `memory ${c.memoryMiB}/${c.maxMemoryMiB} MiB  warm VMMs ${node.pool.ready}\n\n`,
      );
    } else {
      process.stdout.write("node  (no node totals here: a gateway?)\n\n");
    }
    printTable(
      ["ID", "TEMPLATE", "STATE", "AGE", "CPU%", "MEMORY", "VCPUS", "MEMORY MAX"],
      sandboxes.map((s) => {
        const sample = sampled.get(s.sandboxId);
        return [
          s.sandboxId,
          s.name ?? s.templateId,
          s.state,
          age(s.startedAt),
          sample?.cpuUsedPct === undefined ? "-" : sample.cpuUsedPct.toFixed(1),
          mebibytes(sample?.memUsedBytes),
          String(s.cpuCount),
          `${s.memoryMB}Mi`,
        ];
      }),
    );
  };
}
