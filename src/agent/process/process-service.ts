import { constants } from "node:fs";
import { access, stat } from "node:fs/promises";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  type ConnectResponseSchema,
  type Process,
  type ProcessConfig,
  type ProcessSelector,
  Signal,
  type StartRequest,
  type StartResponseSchema,
} from "../../protocol/gen/process/process_pb.js";
import { WarrenError } from "../../shared/index.js";
import { KEEPALIVE, keepaliveIntervalMs, withKeepalive } from "../keepalive.js";
import { resolvePath } from "../paths.js";
import { requestUser } from "../request-user.js";
import type { AgentState } from "../state.js";
import type { UserAccount } from "../users.js";
import { ManagedProcess, type ProcessOutput } from "./managed-process.js";
import type { ProcessRegistry, Selector } from "./process-registry.js";

type EventMessage = MessageInitShape<typeof StartResponseSchema> &
  MessageInitShape<typeof ConnectResponseSchema>;

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

function toSelector(selector: ProcessSelector | undefined): Selector {
  switch (selector?.selector.case) {
    case "pid":
      return { pid: selector.selector.value };
    case "tag":
      return { tag: selector.selector.value };
    default:
      throw new WarrenError("invalid_argument", "process selector needs a pid or a tag");
  }
}

function toEvent(output: ProcessOutput | typeof KEEPALIVE): EventMessage {
  if (output === KEEPALIVE) return { event: { event: { case: "keepalive", value: {} } } };
  if (output.kind === "end") {
    const { exitCode, exited, status, error } = output;
    return { event: { event: { case: "end", value: { exitCode, exited, status, error } } } };
  }
  return {
    event: {
      event: { case: "data", value: { output: { case: output.kind, value: output.data } } },
    },
  };
}

async function workingDirectory(config: ProcessConfig, user: UserAccount, state: AgentState) {
  const workdir =
    config.cwd !== undefined && config.cwd !== ""
      ? resolvePath(config.cwd, user, state.defaultWorkdir)
      : (state.defaultWorkdir ?? user.home);
  const info = await stat(workdir).catch(() => undefined);
  if (!info?.isDirectory()) {
    throw new WarrenError(
      "invalid_argument",
      `cwd '${workdir}' does not exist or is not a directory`,
    );
  }
  return workdir;
}

/**
 * A process's events as Start and Connect stream them: start, output, end, keepalives. A
 * call whose deadline (Connect-Timeout-Ms) passes first ends with `deadline_exceeded` and no
 * end event, as envd's does: the SDKs raise their timeout error from it.
 */
async function* stream(proc: ManagedProcess, ctx: HandlerContext): AsyncGenerator<EventMessage> {
  const queue = proc.subscribe();
  let ended = false;
  try {
    yield { event: { event: { case: "start", value: { pid: proc.pid } } } };
    const interval = keepaliveIntervalMs(ctx.requestHeader);
    for await (const output of withKeepalive(queue.iterate(ctx.signal), interval, ctx.signal)) {
      ended ||= output !== KEEPALIVE && output.kind === "end";
      yield toEvent(output);
    }
  } finally {
    proc.unsubscribe(queue);
  }
  const reason: unknown = ctx.signal.reason;
  if (!ended && reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) {
    throw reason;
  }
}

/**
 * The SDKs run every command and terminal through `/bin/bash`; an image without it (busybox,
 * Alpine) runs them with `/bin/sh` instead, which takes the same `-l -c`.
 */
export async function withShellFallback(cmd: string, bash = "/bin/bash"): Promise<string> {
  if (cmd !== "/bin/bash") return cmd;
  const hasBash = await access(bash, constants.X_OK).then(
    () => true,
    () => false,
  );
  return hasBash ? cmd : "/bin/sh";
}

/** Spawns what a Start asks for, as its user, in its working directory, and registers it. */
async function startProcess(
  state: AgentState,
  registry: ProcessRegistry,
  req: StartRequest,
  ctx: HandlerContext,
): Promise<ManagedProcess> {
  const config = req.process;
  if (!config?.cmd) throw new WarrenError("invalid_argument", "process.cmd is required");
  const cmd = await withShellFallback(config.cmd);
  const user = requestUser(state, ctx.requestHeader);
  const workdir = await workingDirectory(config, user, state);
  const size = req.pty?.size;
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? DEFAULT_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    ...(req.pty ? { TERM: "xterm-256color" } : {}),
    ...state.globalEnv(),
    ...config.envs,
  };
  refuseNul(config.cmd, config.args, env);
  const proc = new ManagedProcess({
    cmd,
    args: config.args,
    envs: { ...config.envs },
    cwd: config.cwd,
    workdir,
    env,
    user,
    tag: req.tag,
    pty: req.pty ? { cols: size?.cols || 80, rows: size?.rows || 24 } : undefined,
    stdin: req.stdin ?? true,
  });
  registry.add(proc);
  const command = [config.cmd, ...config.args].join(" ");
  state.log.record("info", `process ${proc.pid} started as ${user.name}: ${command}`);
  proc.onEnd(() => state.log.record("info", `process ${proc.pid} ended: ${proc.endStatus}`));
  // Connect-Timeout-Ms on Start bounds the process's lifetime, as in E2B's envd.
  const lifetimeMs = ctx.timeoutMs();
  if (lifetimeMs !== undefined) {
    const timer = setTimeout(() => proc.signal("SIGKILL"), Math.max(lifetimeMs, 0));
    proc.onEnd(() => clearTimeout(timer));
  }
  return proc;
}

/** `process.Process`: start, attach to, feed and signal processes in the guest. */
export function createProcessService(
  state: AgentState,
  registry: ProcessRegistry,
): ServiceImpl<typeof Process> {
  return {
    list() {
      return {
        processes: registry.running().map((p) => ({
          pid: p.pid,
          tag: p.spec.tag,
          config: {
            cmd: p.spec.cmd,
            args: [...p.spec.args],
            envs: { ...p.spec.envs },
            cwd: p.spec.cwd,
          },
        })),
      };
    },

    async *start(req, ctx) {
      yield* stream(await startProcess(state, registry, req, ctx), ctx);
    },

    async *connect(req, ctx) {
      yield* stream(registry.get(toSelector(req.process), true), ctx);
    },

    update(req) {
      const size = req.pty?.size;
      if (!size) throw new WarrenError("invalid_argument", "pty.size is required");
      registry.get(toSelector(req.process)).resize(size.cols, size.rows);
      return {};
    },

    sendInput(req) {
      const proc = registry.get(toSelector(req.process));
      const input = req.input?.input;
      if (input?.case === "stdin") proc.writeStdin(input.value);
      else if (input?.case === "pty") proc.writePty(input.value);
      else throw new WarrenError("invalid_argument", "input needs stdin or pty bytes");
      return {};
    },

    async streamInput(requests) {
      let proc: ManagedProcess | undefined;
      for await (const req of requests) {
        const event = req.event;
        if (event.case === "start") proc = registry.get(toSelector(event.value.process));
        else if (event.case === "data") {
          if (!proc) throw new WarrenError("invalid_argument", "send a start event before data");
          const input = event.value.input?.input;
          if (input?.case === "stdin") proc.writeStdin(input.value);
          else if (input?.case === "pty") proc.writePty(input.value);
        }
      }
      return {};
    },

    sendSignal(req) {
      const proc = registry.get(toSelector(req.process));
      if (req.signal === Signal.SIGKILL) proc.signal("SIGKILL");
      else if (req.signal === Signal.SIGTERM) proc.signal("SIGTERM");
      else
        throw new WarrenError(
          "invalid_argument",
          "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL",
        );
      return {};
    },

    closeStdin(req) {
      registry.get(toSelector(req.process)).closeStdin();
      return {};
    },
  };
}

/**
 * A NUL byte cannot cross execve (C strings): spawn would throw, which read as envd's own
 * failure (internal) rather than the caller's.
 */
function refuseNul(
  cmd: string,
  args: readonly string[],
  env: Readonly<Record<string, string>>,
): void {
  const bad = (text: string) => text.includes("\0");
  if (bad(cmd)) throw new WarrenError("invalid_argument", "process.cmd contains a NUL byte");
  if (args.some(bad)) throw new WarrenError("invalid_argument", "process.args contain a NUL byte");
  for (const [key, value] of Object.entries(env)) {
    if (bad(key) || bad(value)) {
      throw new WarrenError(
        "invalid_argument",
        `environment variable ${JSON.stringify(key)} contains a NUL byte`,
      );
    }
  }
}
