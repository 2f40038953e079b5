#!/usr/bin/env node
// `npm start`: sets the machine up on first run (npm dependencies, the build, then the host
// setup: Debian packages, guest kernel and images, with progress), then starts Warren. Until
// the node server lands (issue 4) it runs the agent on the host for development.
import { spawn, spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureDeps } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
ensureDeps(root);
for (const script of ["build.mjs", "setup.mjs"]) {
  const step = spawnSync(process.execPath, [join(root, "scripts", script)], {
    stdio: "inherit",
    cwd: root,
  });
  if (step.status !== 0) process.exit(step.status ?? 1);
}

process.stderr.write(
  "start: the node server is not built yet; running the agent (envd) on this host\n",
);
const agent = spawn(
  process.execPath,
  [join(root, "dist", "agent", "envd.mjs"), ...process.argv.slice(2)],
  {
    stdio: "inherit",
  },
);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => agent.kill(signal));
agent.on("exit", (code) => process.exit(code ?? 1));
