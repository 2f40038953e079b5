#!/usr/bin/env node
// `npm run gateway`: the cluster's front (docs/cluster.md). Installs dependencies and builds on
// first run, then runs the gateway bundle; it needs no host setup (no VMs run here).
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureBuilt } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
ensureBuilt(root);
const gateway = spawn(
  process.execPath,
  ["--enable-source-maps", join(root, "dist", "gateway", "main.mjs"), ...process.argv.slice(2)],
  { stdio: "inherit", cwd: root },
);
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => gateway.kill(signal));
gateway.on("exit", (code) => process.exit(code ?? 1));
