import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { WarrenError } from "../shared/index.js";

export interface CommandOptions {
  readonly cwd?: string;
  /** Added to the inherited environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Written to the command's stdin, which is closed after. */
  readonly input?: string;
  /** Return a non-zero exit instead of throwing. */
  readonly allowFailure?: boolean;
}

export interface CommandResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

const TAIL_LINES = 25;

function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** A shell-like rendering of a command line, for messages and the log. */
export function formatCommand(file: string, args: readonly string[]): string {
  return [file, ...args].map(quote).join(" ");
}

function tail(text: string): string {
  const lines = text.trimEnd().split("\n");
  return lines.slice(-TAIL_LINES).join("\n");
}

/**
 * Runs the host commands of a setup run. Output is captured, never shown (progress lines stay
 * readable), and appended to the run's log file; a failure names the command, its exit code,
 * the last lines it printed and the log.
 */
export class CommandRunner {
  readonly #logPath: string | undefined;

  constructor(logPath?: string) {
    this.#logPath = logPath;
  }

  get logPath(): string | undefined {
    return this.#logPath;
  }

  async run(
    file: string,
    args: readonly string[],
    options: CommandOptions = {},
  ): Promise<CommandResult> {
    const line = formatCommand(file, args);
    this.#log(`\n$ ${line}\n`);
    const child = spawn(file, args, {
      cwd: options.cwd,
      env: options.env ? { ...process.env, ...options.env } : process.env,
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout.push(chunk);
      this.#log(chunk);
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr.push(chunk);
      this.#log(chunk);
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
    const code = await new Promise<number>((resolve, reject) => {
      child.once("error", (err) =>
        reject(
          new WarrenError("unavailable", `cannot run ${file}: ${err.message}`, { cause: err }),
        ),
      );
      child.once("close", (status, signal) => resolve(status ?? (signal ? 128 : 1)));
    });
    const result = {
      code,
      stdout: Buffer.concat(stdout).toString(),
      stderr: Buffer.concat(stderr).toString(),
    };
    this.#log(`[exit ${code}]\n`);
    if (code !== 0 && !options.allowFailure) {
      const output = tail(`${result.stdout}\n${result.stderr}`);
      const where = this.#logPath ? `\n(full output in ${this.#logPath})` : "";
      throw new WarrenError("internal", `\`${line}\` exited with ${code}:\n${output}${where}`);
    }
    return result;
  }

  #log(data: string | Buffer): void {
    if (this.#logPath) appendFileSync(this.#logPath, data);
  }
}
