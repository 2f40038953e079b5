import { formatCommand, runProgram } from "../shared/index.js";
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
export type RunCommand = (
  file: string,
  args: readonly string[],
  options?: { readonly input?: string },
) => Promise<CommandResult>;

const TIMEOUT_MS = 30_000;

export const runCommand: RunCommand = async (file, args, options) => {
  const command = [file, ...args];
  const outcome = await runProgram(file, args, {
    input: options?.input,
    timeoutMs: TIMEOUT_MS,
  }).catch((err: Error) => {
    throw new NetworkError(`${file} could not start: ${err.message}`, command, "", undefined, {
      cause: err,
    });
  });
  const stderr = outcome.stderr.trim();
  if (outcome.code === 0) return { stdout: outcome.stdout, stderr };
  const how = outcome.signal ? `was killed by ${outcome.signal}` : `exited with ${outcome.code}`;
  const detail = stderr ? `: ${stderr}` : "";
  throw new NetworkError(
    `${formatCommand(file, args)} ${how}${detail}`,
    command,
    stderr,
    outcome.code ?? undefined,
  );
};
