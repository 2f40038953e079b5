#!/usr/bin/env node
// `npm start`: sets the machine up on first run (npm dependencies, the build, then the host
// setup: Debian packages, guest kernel and images, with progress), then runs the node server
// (API and sandbox proxy on 127.0.0.1:3000 unless WARREN_HOST / WARREN_PORT say otherwise).
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

const server = spawn(
  process.execPath,
  ["--enable-source-maps", join(root, "dist", "server", "main.mjs"), ...process.argv.slice(2)],
  { stdio: "inherit", cwd: root },
);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.kill(signal));
server.on("exit", (code) => process.exit(code ?? 1));
