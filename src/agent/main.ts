import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import {
  CODE_INTERPRETER_MARKER,
  ENVD_PORT,
  ENVD_VERSION,
  INTERPRETER_PORT,
} from "../protocol/index.js";
import { handleStrayErrors } from "../shared/stray-errors.js";
import { hasValidToken } from "./auth.js";
import { setSystemClock } from "./clock.js";
import { seedGuestRandomness } from "./entropy.js";
import { builtDrivers, Contexts, createInterpreter, kernelStarter } from "./interpreter/index.js";
import { system } from "./native/system.js";
import { createAgent } from "./server.js";
import { installCaCertificates } from "./trust-store.js";
import { mountGuestVolume } from "./volume-mounts.js";

/**
 * Where forked Python kernels connect back to envd: root-only, outside /tmp (which agents
 * clean), one per envd (a developer may run several on one host).
 */
const KERNEL_SOCKET = `/run/warren-envd/kernels-${process.pid}.sock`;
const HELP = `envd — Warren's in-guest agent (E2B envd protocol ${ENVD_VERSION})

Usage: envd [--port N] [--host ADDR] [--default-user NAME] [--guest] [--code-interpreter]

  --port N             port to listen on (default ${ENVD_PORT})
  --host ADDR          address to bind (default 0.0.0.0)
  --default-user NAME  user for requests that name none (default "user", root if absent)
  --guest              envd is a microVM's agent (never pass it on a host): POST /init
                       sets the system clock and reseeds the kernel's random pool, and
                       the idle legacy PIT is stopped
  --code-interpreter   also serve E2B's code interpreter on port ${INTERPRETER_PORT} (python,
                       javascript, typescript, bash contexts); on by default in a guest
                       whose rootfs has ${CODE_INTERPRETER_MARKER}
  --version            print the protocol version and exit
`;

function fail(message: string): never {
  process.stderr.write(`envd: ${message}\n\n${HELP}`);
  process.exit(2);
}

let args: ReturnType<typeof parseArgs>["values"];
try {
  ({ values: args } = parseArgs({
    options: {
      port: { type: "string" },
      host: { type: "string" },
      "default-user": { type: "string" },
      guest: { type: "boolean" },
      "code-interpreter": { type: "boolean" },
      version: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  }));
} catch (err) {
  fail((err as Error).message);
}

if (args.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
if (args.version) {
  process.stdout.write(`${ENVD_VERSION}\n`);
  process.exit(0);
}
const port = args.port === undefined ? ENVD_PORT : Number(args.port);
if (!Number.isInteger(port) || port < 0 || port > 65535)
  fail(`--port must be a port number, got '${args.port}'`);
const host = typeof args.host === "string" ? args.host : "0.0.0.0";

// Files the agent creates are 0644 and directories 0755, whatever umask it inherited.
process.umask(0o022);
// The guest's only agent, which nothing would start again: a stray error is logged, and envd
// goes on serving.
handleStrayErrors(
  { debug: () => {}, info: logLine("info"), warn: logLine("warn"), error: logLine("error") },
  "envd",
  "continue",
);

if (args.guest && !system().stopPitTimer()) {
  process.stderr.write("envd: no port access: the legacy PIT keeps ticking\n");
}
const agent = createAgent({
  defaultUser: typeof args["default-user"] === "string" ? args["default-user"] : undefined,
  setClock: args.guest ? setSystemClock : undefined,
  seedRandomness: args.guest ? seedGuestRandomness : undefined,
  mountVolume: args.guest ? mountGuestVolume : undefined,
  trustCa: args.guest ? (pem) => installCaCertificates(pem) : undefined,
});
agent.server.on("error", (err) => fail(`cannot listen on ${host}:${port}: ${err.message}`));
agent.server.listen(port, host, () => {
  process.stderr.write(`envd ${ENVD_VERSION} listening on ${host}:${port}\n`);
});
const interpreter =
  args["code-interpreter"] === true || (args.guest === true && existsSync(CODE_INTERPRETER_MARKER))
    ? startInterpreter()
    : undefined;
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => {
    interpreter?.closeAll();
    agent.close().finally(() => process.exit(0));
  });
}

/** The code interpreter beside envd: its kernels built next to this bundle, in interpreter/. */
function startInterpreter(): Contexts {
  const drivers = builtDrivers(join(dirname(fileURLToPath(import.meta.url)), "interpreter"));
  const globals = () => agent.state.globalEnv();
  const kernels = kernelStarter(drivers, globals, KERNEL_SOCKET);
  const contexts = new Contexts(kernels, "/home/user");
  const authorize = (token: string | undefined) => hasValidToken(agent.state, token);
  const { server } = createInterpreter({ contexts, globals, authorize });
  server.on("error", (err) => fail(`cannot listen on ${host}:${INTERPRETER_PORT}: ${err.message}`));
  server.listen(INTERPRETER_PORT, host, () => {
    process.stderr.write(`envd: code interpreter listening on ${host}:${INTERPRETER_PORT}\n`);
  });
  return contexts;
}

/** envd's own lines go to its stderr (the guest console), one per event. */
function logLine(level: string) {
  return (fields: Record<string, unknown>, event: string) => {
    const err = fields.err instanceof Error ? (fields.err.stack ?? fields.err.message) : fields.err;
    process.stderr.write(`envd ${level}: ${event} ${String(err ?? "")}\n`);
  };
}
