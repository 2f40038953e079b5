#!/usr/bin/env node
// `npm run setup`: makes this host ready to run Warren's microVMs (as root): Debian packages,
// then the guest kernel, initramfs, agent drive and base rootfs in the images directory
// (<data dir>/images/ unless --images-dir or $WARREN_IMAGES_DIR names another), and the
// code-interpreter-v1 template's rootfs unless $WARREN_CODE_INTERPRETER is off.
// Idempotent: a second run checks everything and does nothing. See src/host-setup/README.md.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { ensureDeps } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const GUEST_ARTIFACTS = ["kernel", "initramfs", "agent-drive", "base-rootfs"];
const CODE_INTERPRETER = "code-interpreter-rootfs";
const WANTED = [
  ...GUEST_ARTIFACTS,
  ...(process.env.WARREN_CODE_INTERPRETER === "off" ? [] : [CODE_INTERPRETER]),
];
// debootstrap: the cached bootstrap tarball the rootfs images are built on.
const ARTIFACTS = [...GUEST_ARTIFACTS, CODE_INTERPRETER, "debootstrap"];
const HELP = `Usage: npm run setup -- [--data-dir DIR] [--images-dir DIR] [--only LIST] [--rebuild LIST]
                         [--no-packages]

  --data-dir DIR   Warren's data directory (default $WARREN_HOME, else /var/lib/warren)
  --images-dir DIR where the guest images go (default $WARREN_IMAGES_DIR, else
                   <data dir>/images)
  --only LIST      check and build only these guest artifacts (comma-separated; default
                   all, but ${CODE_INTERPRETER} not when WARREN_CODE_INTERPRETER=off)
  --rebuild LIST   rebuild these even when up to date ("all" for every one); rebuilding
                   "kernel" also moves to the newest Debian cloud kernel, "debootstrap"
                   (the cached bootstrap tarball) also rebuilds the rootfs images
  --no-packages    do not install missing Debian packages
Artifacts: ${ARTIFACTS.join(", ")}
`;

function fail(message) {
  process.stderr.write(`setup: ${message}\n\n${HELP}`);
  process.exit(2);
}

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      "data-dir": { type: "string" },
      "images-dir": { type: "string" },
      only: { type: "string" },
      rebuild: { type: "string" },
      "no-packages": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (err) {
  fail(err.message);
}
if (args.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
function list(value, name, allowed) {
  if (value === undefined) return undefined;
  const names = value === "all" ? allowed : value.split(",").map((s) => s.trim());
  const unknown = names.filter((n) => !allowed.includes(n));
  if (unknown.length > 0) fail(`--${name}: unknown artifact ${unknown.join(", ")}`);
  return names;
}

ensureDeps(root);
const { register } = await import("tsx/esm/api");
register();
const { DEFAULT_DATA_DIR, ensureHostSetup } = await import("../src/host-setup/index.ts");
const dataDir = args["data-dir"] || process.env.WARREN_HOME || DEFAULT_DATA_DIR;
const imagesDir = args["images-dir"] || process.env.WARREN_IMAGES_DIR || undefined;
try {
  const artifacts = await ensureHostSetup({
    dataDir,
    imagesDir,
    only: list(args.only, "only", [...GUEST_ARTIFACTS, CODE_INTERPRETER]) ?? WANTED,
    rebuild: list(args.rebuild, "rebuild", ARTIFACTS),
    installPackages: !args["no-packages"],
  });
  for (const [key, value] of Object.entries(artifacts))
    process.stderr.write(`  ${key}: ${typeof value === "object" ? value.path : value}\n`);
} catch (err) {
  process.stderr.write(`setup: ${err.message}\n`);
  process.exit(1);
}
