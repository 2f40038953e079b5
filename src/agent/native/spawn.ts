import { EventEmitter } from "node:events";
import { Socket } from "node:net";
import { delimiter, join } from "node:path";
import { loadAddon } from "../../shared/load-addon.js";

interface SpawnAddon {
  /** vfork + execve of the first candidate that exists (see spawn.c); throws with `code`. */
  spawn(
    file: string,
    candidates: readonly string[],
    argv: readonly string[],
    envp: readonly string[],
    cwd: string,
    uid: number,
    gid: number,
    pipeStdin: boolean,
    onExit: (code: number | null, signal: number | null) => void,
  ): { pid: number; stdin: number; stdout: number; stderr: number };
}

let addon: SpawnAddon | undefined;

function spawnAddon(): SpawnAddon {
  addon ??= loadAddon<SpawnAddon>("spawn", import.meta.url);
  return addon;
}

export interface VforkOptions {
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  readonly uid: number;
  readonly gid: number;
  readonly stdin: boolean;
}

/** What execvp would try for `file`, searching the child's own PATH (as libuv does). */
export function execCandidates(file: string, env: Readonly<Record<string, string>>): string[] {
  if (file.includes("/")) return [file];
  const path = env.PATH ?? "/usr/bin:/bin";
  return path.split(delimiter).map((dir) => join(dir || ".", file));
}

/**
 * A child started by the `spawn` addon, shaped like the part of Node's ChildProcess that
 * envd uses: `exit` (code, signal number), then `close` once stdout and stderr have ended.
 */
export class VforkedChild extends EventEmitter<{
  exit: [code: number | null, signal: number | null];
  close: [];
}> {
  readonly pid: number;
  readonly stdin: Socket | undefined;
  readonly stdout: Socket;
  readonly stderr: Socket;

  /** Throws (with the errno's `code`, e.g. ENOENT) when the command cannot start. */
  constructor(file: string, args: readonly string[], options: VforkOptions) {
    super();
    let exited = false;
    let openStreams = 2;
    const closeOnce = () => {
      if (exited && openStreams === 0) this.emit("close");
    };
    const fds = spawnAddon().spawn(
      file,
      execCandidates(file, options.env),
      [file, ...args],
      Object.entries(options.env).map(([key, value]) => `${key}=${value}`),
      options.cwd,
      options.uid,
      options.gid,
      options.stdin,
      (code, signal) => {
        exited = true;
        this.emit("exit", code, signal);
        closeOnce();
      },
    );
    this.pid = fds.pid;
    this.stdin = fds.stdin >= 0 ? new Socket({ fd: fds.stdin, readable: false }) : undefined;
    this.stdout = new Socket({ fd: fds.stdout, writable: false });
    this.stderr = new Socket({ fd: fds.stderr, writable: false });
    for (const stream of [this.stdout, this.stderr]) {
      stream.on("error", () => {}); // a failed read ends the stream: 'close' follows
      stream.once("close", () => {
        openStreams -= 1;
        closeOnce();
      });
    }
  }
}
