import type { Command } from "commander";
import type { Connection } from "../context.js";
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
  const [sandboxes, samples] = await Promise.all([
    listSandboxes("running,paused", {}),
    scrape(connection),
  ]);
  const gauge = (name: string, labels = "") => samples?.get(labels ? `${name}{${labels}}` : name);
  const per = (name: string, id: string) =>
    [...(samples?.entries() ?? [])].find(([k]) => k.startsWith(`${name}{sandbox_id="${id}"`))?.[1];
  return () => {
    const now = new Date().toISOString().replace("T", " ").slice(0, 19);
    process.stdout.write(`warren top  ${connection.url}  ${now}  (q to quit)\n`);
    if (samples) {
      const used = (r: string) => gauge("warren_capacity", `resource="${r}",kind="used"`) ?? 0;
      const limit = (r: string) => gauge("warren_capacity", `resource="${r}",kind="limit"`) ?? 0;
      process.stdout.write(
        `node  sandboxes ${used("sandboxes")}/${limit("sandboxes")}  vCPUs ${used("vcpus")}/${limit("vcpus")}  ` +
          `memory ${used("memory_mib")}/${limit("memory_mib")} MiB  warm VMMs ${gauge("warren_pool_vms_ready") ?? 0}\n\n`,
      );
    } else {
      process.stdout.write("node  (no /metrics here: a gateway, or WARREN_METRICS_AUTH)\n\n");
    }
    printTable(
      ["ID", "TEMPLATE", "STATE", "AGE", "CPU%", "MEMORY", "VCPUS", "MEMORY MAX"],
      sandboxes.map((s) => {
        const cpu = per("warren_sandbox_cpu_used_percent", s.sandboxId);
        const mem = per("warren_sandbox_memory_used_bytes", s.sandboxId);
        return [
          s.sandboxId,
          s.name ?? s.templateId,
          s.state,
          age(s.startedAt),
          cpu === undefined ? "-" : cpu.toFixed(1),
          mebibytes(mem),
          String(s.cpuCount),
          `${s.memoryMB}Mi`,
        ];
      }),
    );
  };
}

/** The node's Prometheus samples (`name{labels}` → value), or undefined when it has none. */
async function scrape(connection: Connection): Promise<Map<string, number> | undefined> {
  const res = await fetch(`${connection.url}/metrics`, {
    headers: { "x-api-key": connection.apiKey },
  }).catch(() => undefined);
  if (!res?.ok) return undefined;
  const samples = new Map<string, number>();
  for (const line of (await res.text()).split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}
