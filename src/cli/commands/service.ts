import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { CliError } from "../errors.js";

const UNIT = "warren-node.service";
/** Where deploy/systemd/warren-node.service assumes the tree and node are. */
const TEMPLATE_ROOT = "/opt/warren";
const TEMPLATE_NODE = "/usr/bin/node";

/** `warren service install|uninstall|status`: the node server as a systemd service of this host. */
export function serviceCommands(program: Command): void {
  const service = program
    .command("service")
    .description("run the node server as a systemd service of this host");

  service
    .command("install")
    .description(`write ${UNIT} for this tree, then enable and start it`)
    .option("--root <dir>", "install under this directory instead of / (a package or image)", "/")
    .option("--no-start", "write the unit only: no daemon-reload, enable or start")
    .action(async (opts) => {
      const path = unitPath(opts.root);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, renderUnit(treeRoot(), process.execPath), { mode: 0o644 });
      process.stdout.write(`wrote ${path}\n`);
      if (!opts.start) return;
      systemctl(["daemon-reload"]);
      systemctl(["enable", "--now", UNIT]);
      process.stdout.write(`${UNIT} enabled and started: warren service status\n`);
    });

  service
    .command("uninstall")
    .description(`stop and disable ${UNIT}, then remove it`)
    .option("--root <dir>", "the directory it was installed under", "/")
    .option("--no-stop", "remove the unit file only")
    .action(async (opts) => {
      const path = unitPath(opts.root);
      if (!existsSync(path)) throw new CliError(`${path} is not there: nothing to uninstall`);
      if (opts.stop) systemctl(["disable", "--now", UNIT]);
      await rm(path);
      if (opts.stop) systemctl(["daemon-reload"]);
      process.stdout.write(`removed ${path}\n`);
    });

  service
    .command("status")
    .description(`systemctl status ${UNIT}`)
    .action(() => {
      const code = systemctl(["status", "--no-pager", UNIT], { passThrough: true });
      if (code !== 0) throw new CliError("", code);
    });
}

function unitPath(root: string): string {
  return join(root, "etc", "systemd", "system", UNIT);
}

/** The repository's unit with this tree's location and this node binary. */
export function renderUnit(tree: string, node: string): string {
  const unit = readFileSync(join(tree, "deploy", "systemd", UNIT), "utf8");
  return unit.replaceAll(TEMPLATE_NODE, node).replaceAll(TEMPLATE_ROOT, tree);
}

/** The Warren tree this command belongs to (the directory holding its package.json). */
function treeRoot(): string {
  for (
    let dir = dirname(fileURLToPath(import.meta.url));
    dir !== dirname(dir);
    dir = dirname(dir)
  ) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg) && /"name":\s*"warren"/.test(readFileSync(pkg, "utf8"))) return dir;
  }
  throw new CliError("cannot find the Warren tree this command runs from");
}

/** Runs systemctl; a host without systemd is one clear line. */
function systemctl(args: string[], options: { passThrough?: boolean } = {}): number {
  const run = spawnSync("systemctl", args, {
    stdio: options.passThrough ? "inherit" : ["ignore", "pipe", "pipe"],
    encoding: "utf8",
  });
  if (run.error)
    throw new CliError(
      `systemctl is not available here (${(run.error as NodeJS.ErrnoException).code})`,
    );
  if (options.passThrough) return run.status ?? 1;
  if (run.status !== 0) {
    const why = `${run.stderr ?? ""}`.trim().split("\n")[0] || `exit ${run.status}`;
    throw new CliError(`systemctl ${args.join(" ")}: ${why}`);
  }
  return 0;
}
