import { appendFileSync } from "node:fs";
import { formatCommand, runProgram, WarrenError } from "../shared/index.js";

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
    const outcome = await runProgram(file, args, {
      cwd: options.cwd,
      env: options.env,
      input: options.input,
      onOutput: (chunk) => this.#log(chunk),
    }).catch((err: Error) => {
      throw new WarrenError("unavailable", `cannot run ${file}: ${err.message}`, { cause: err });
    });
    const code = outcome.code ?? 128;
    const result = { code, stdout: outcome.stdout, stderr: outcome.stderr };
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
