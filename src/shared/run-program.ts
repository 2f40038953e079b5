import { spawn } from "node:child_process";

export interface RunProgramOptions {
  readonly cwd?: string;
  /** Added to the inherited environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Written to the program's stdin, which is closed after; without it stdin is /dev/null. */
  readonly input?: string;
  /** Killed (SIGKILL) when it runs longer. */
  readonly timeoutMs?: number;
  /** Each chunk of stdout and stderr as it comes (a log file's copy). */
  readonly onOutput?: (chunk: Buffer) => void;
}

export interface ProgramOutcome {
  /** The exit code; null when a signal ended it. */
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs one program with arguments, never through a shell, and collects what it prints.
 * Resolves however it exits (the caller decides what a failure is and which error says so);
 * rejects only when it could not start. The one way Warren's host code runs a command.
 */
export function runProgram(
  file: string,
  args: readonly string[],
  options: RunProgramOptions = {},
): Promise<ProgramOutcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      cwd: options.cwd,
      env: options.env ? { ...process.env, ...options.env } : process.env,
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      timeout: options.timeoutMs,
      killSignal: "SIGKILL",
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      into.push(chunk);
      options.onOutput?.(chunk);
    };
    child.stdout?.on("data", collect(stdout));
    child.stderr?.on("data", collect(stderr));
    child.once("error", reject);
    child.once("close", (code, signal) =>
      resolve({
        code,
        signal,
        stdout: Buffer.concat(stdout).toString(),
        stderr: Buffer.concat(stderr).toString(),
      }),
    );
    if (options.input !== undefined) {
      child.stdin?.on("error", () => {}); // an early exit closes the pipe; "close" reports it
      child.stdin?.end(options.input);
    }
  });
}

function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** A shell-like rendering of a command line, for messages and logs. */
export function formatCommand(file: string, args: readonly string[]): string {
  return [file, ...args].map(quote).join(" ");
}
