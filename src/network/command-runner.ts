import { spawn } from "node:child_process";
import { NetworkError } from "./errors.js";

export interface CommandResult {
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs one program with arguments (never through a shell), feeding `input` to its stdin.
 * Resolves with its output when it exits 0, rejects with a NetworkError otherwise. Every
 * command this component runs goes through one, so tests can wrap it to inject failures.
 */
export type CommandRunner = (
  file: string,
  args: readonly string[],
  options?: { readonly input?: string },
) => Promise<CommandResult>;

const TIMEOUT_MS = 30_000;

export const runCommand: CommandRunner = (file, args, options) =>
  new Promise((resolve, reject) => {
    const command = [file, ...args];
    const child = spawn(file, args, {
      stdio: [options?.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      timeout: TIMEOUT_MS,
      killSignal: "SIGKILL",
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout?.on("data", (chunk: Buffer) => stdout.push(chunk));
    child.stderr?.on("data", (chunk: Buffer) => stderr.push(chunk));
    child.once("error", (err) => {
      reject(
        new NetworkError(`${file} could not start: ${err.message}`, command, "", undefined, {
          cause: err,
        }),
      );
    });
    child.once("close", (code, signal) => {
      const err = Buffer.concat(stderr).toString().trim();
      if (code === 0) {
        resolve({ stdout: Buffer.concat(stdout).toString(), stderr: err });
        return;
      }
      const how = signal ? `was killed by ${signal}` : `exited with ${code}`;
      const detail = err ? `: ${err}` : "";
      reject(
        new NetworkError(`${command.join(" ")} ${how}${detail}`, command, err, code ?? undefined),
      );
    });
    if (options?.input !== undefined) {
      child.stdin?.on("error", () => {}); // an early exit closes the pipe; "close" reports it
      child.stdin?.end(options.input);
    }
  });
