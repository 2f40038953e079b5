#!/usr/bin/env node
// Builds what runs outside the source tree: the native addons, the agent bundle
// (dist/agent/envd.mjs) with every addon it loads copied beside it in build/Release/, the
// server bundle (dist/server/main.mjs) and the keeper's (dist/keeper/main.mjs) with their own
// addons likewise.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "agent");
const release = join(out, "build", "Release");

function step(message) {
  process.stderr.write(`build: ${message}\n`);
}

function newerThan(target, sources) {
  if (!existsSync(target)) return false;
  const built = statSync(target).mtimeMs;
  return sources.every((source) => statSync(source).mtimeMs <= built);
}

/**
 * Puts a built addon where a bundle loads it: only when it changed, and by rename, never by
 * rewriting the file in place — a running server (npm start beside npm test, an e2e run
 * beside a unit run) has the old one mapped, and a truncated mapping is a SIGBUS in it.
 */
function placeAddon(from, to) {
  if (existsSync(to) && readFileSync(to).equals(readFileSync(from))) return;
  const staged = `${to}.${process.pid}.tmp`;
  copyFileSync(from, staged);
  renameSync(staged, to);
}

function buildAddon(dir, name, sources) {
  const target = join(dir, "build", "Release", `${name}.node`);
  if (
    newerThan(
      target,
      sources.map((file) => join(dir, file)),
    )
  )
    return target;
  const args = ["rebuild", "-C", dir, "--loglevel=error"];
  // Build against the running Node's own headers: no download, works offline.
  const prefix = dirname(dirname(process.execPath));
  if (existsSync(join(prefix, "include", "node", "node_api.h"))) args.push(`--nodedir=${prefix}`);
  const gyp = join(root, "node_modules", "node-gyp", "bin", "node-gyp.js");
  const result = spawnSync(process.execPath, [gyp, ...args], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  if (result.status !== 0) throw new Error(`node-gyp failed in ${dir}`);
  return target;
}

step("native addons inotify, system, spawn (agent), memmerge, tapfd, filelease, nslisten (server)");
/** src/agent/native/<name>/: <name>.c and its binding.gyp. */
const agentAddon = (name) =>
  buildAddon(join(root, "src", "agent", "native", name), name, [`${name}.c`, "binding.gyp"]);
const inotifyAddon = agentAddon("inotify");
const systemAddon = agentAddon("system");
const spawnAddon = agentAddon("spawn");
/** src/vmm/qemu/native/<name>/: <name>.c and its binding.gyp. */
const vmmAddon = (name) =>
  buildAddon(join(root, "src", "vmm", "qemu", "native", name), name, [`${name}.c`, "binding.gyp"]);
/** src/network/native/<name>/: likewise. */
const networkAddon = (name) =>
  buildAddon(join(root, "src", "network", "native", name), name, [`${name}.c`, "binding.gyp"]);
const nslistenAddon = networkAddon("nslisten");
const serverAddons = [
  ...["memmerge", "tapfd", "filelease"].map((name) => [vmmAddon(name), `${name}.node`]),
  [nslistenAddon, "nslisten.node"],
];

/** What both bundles (agent and server) share: one ESM file for Node 20 with a source map. */
const NODE_BUNDLE = {
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  sourcemap: true,
  legalComments: "none",
  logLevel: "warning",
};

step("bundling the agent");
mkdirSync(release, { recursive: true });
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "agent", "main.ts")],
  outfile: join(out, "envd.mjs"),
  // Bundled CommonJS (node-pty) uses require() and __dirname; give the ESM bundle real ones.
  banner: {
    js: [
      "import { createRequire as __warrenRequire } from 'node:module';",
      "import { fileURLToPath as __warrenPath } from 'node:url';",
      "const require = __warrenRequire(import.meta.url);",
      "const __filename = __warrenPath(import.meta.url);",
      "const __dirname = __warrenPath(new URL('.', import.meta.url));",
    ].join(" "),
  },
});

const addons = [
  [inotifyAddon, "inotify.node"],
  [systemAddon, "system.node"],
  [spawnAddon, "spawn.node"],
  [join(root, "node_modules", "node-pty", "build", "Release", "pty.node"), "pty.node"],
  [join(root, "node_modules", "fs-xattr", "build", "Release", "xattr.node"), "xattr.node"],
];
for (const [from, name] of addons) {
  if (!existsSync(from))
    throw new Error(`missing native addon ${from}: run npm install (with install scripts allowed)`);
  placeAddon(from, join(release, name));
}

step("the code interpreter's kernel drivers (javascript bundled, python and r copied)");
const kernels = join(root, "src", "agent", "interpreter", "kernels");
await build({
  ...NODE_BUNDLE,
  // It goes onto the agent drive: no source map there (the driver trims its own frames).
  sourcemap: false,
  entryPoints: [join(kernels, "js", "js-kernel.ts")],
  outfile: join(out, "interpreter", "js-kernel.mjs"),
});
mkdirSync(join(out, "interpreter", "python"), { recursive: true });
for (const file of ["warren_kernel.py", "warren_zygote.py", "warren_charts.py"])
  copyFileSync(join(kernels, "python", file), join(out, "interpreter", "python", file));
mkdirSync(join(out, "interpreter", "r"), { recursive: true });
copyFileSync(
  join(kernels, "r", "warren_kernel.R"),
  join(out, "interpreter", "r", "warren_kernel.R"),
);
step(`agent ready in ${out}`);

step("bundling the node server");
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "server", "main.ts")],
  outfile: join(root, "dist", "server", "main.mjs"),
  // Dependencies load from node_modules as installed (native addons, pino's workers).
  packages: "external",
});
const serverRelease = join(root, "dist", "server", "build", "Release");
mkdirSync(serverRelease, { recursive: true });
for (const [from, name] of serverAddons) placeAddon(from, join(serverRelease, name));
step(`server ready in ${join(root, "dist", "server")}`);

step("bundling the guest services");
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "guest-services", "main.ts")],
  outfile: join(root, "dist", "guest-services", "main.mjs"),
  packages: "external",
});
// The egress gate asks where a redirected connection was going (SO_ORIGINAL_DST).
const servicesRelease = join(root, "dist", "guest-services", "build", "Release");
mkdirSync(servicesRelease, { recursive: true });
placeAddon(nslistenAddon, join(servicesRelease, "nslisten.node"));
step(`guest services ready in ${join(root, "dist", "guest-services")}`);

step("bundling the keeper");
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "keeper", "main.ts")],
  outfile: join(root, "dist", "keeper", "main.mjs"),
  packages: "external",
});
// It opens each VM's tap and spawns QEMU mergeable: the two addons that takes.
const keeperRelease = join(root, "dist", "keeper", "build", "Release");
mkdirSync(keeperRelease, { recursive: true });
for (const [from, name] of serverAddons.filter(([, n]) =>
  ["tapfd.node", "memmerge.node"].includes(n),
))
  placeAddon(from, join(keeperRelease, name));
step(`keeper ready in ${join(root, "dist", "keeper")}`);

step("bundling the gateway");
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "gateway", "main.ts")],
  outfile: join(root, "dist", "gateway", "main.mjs"),
  packages: "external",
});
step(`gateway ready in ${join(root, "dist", "gateway")}`);

step("bundling the dashboard");
const dashboard = join(root, "dist", "dashboard");
mkdirSync(dashboard, { recursive: true });
await build({
  entryPoints: [join(root, "src", "dashboard", "app", "main.ts")],
  outfile: join(dashboard, "app.js"),
  bundle: true,
  platform: "browser",
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  // Served to browsers: the libraries' license notices go with them.
  legalComments: "eof",
  logLevel: "warning",
});
for (const [from, name] of [
  [join(root, "src", "dashboard", "index.html"), "index.html"],
  [join(root, "src", "dashboard", "style.css"), "style.css"],
  [join(root, "node_modules", "@xterm", "xterm", "css", "xterm.css"), "xterm.css"],
  [join(root, "node_modules", "uplot", "dist", "uPlot.min.css"), "uPlot.min.css"],
]) {
  copyFileSync(from, join(dashboard, name));
}
step(`dashboard ready in ${dashboard}`);

step("bundling the warren command");
const cli = join(root, "dist", "cli", "warren.mjs");
await build({
  ...NODE_BUNDLE,
  entryPoints: [join(root, "src", "cli", "main.ts")],
  outfile: cli,
  packages: "external",
  banner: { js: "#!/usr/bin/env node" },
});
chmodSync(cli, 0o755);
step(`warren command ready: ${cli}`);
