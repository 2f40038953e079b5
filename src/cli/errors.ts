/**
 * How the CLI fails: one line on stderr (`warren: <what went wrong>`) and an exit code: 1 for
 * a failed operation, 2 for a command used wrongly, or the code of the command `exec` ran.
 */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = "CliError";
  }
}

/** A usage mistake (exit 2), as commander reports its own. */
export function usage(message: string): CliError {
  return new CliError(message, 2);
}

/** One line saying what went wrong, whatever was thrown (an SDK error, a refused connection). */
export function describeError(err: unknown, url: string | undefined): string {
  const cause = (err as { cause?: { code?: string } } | undefined)?.cause;
  const code = (err as NodeJS.ErrnoException | undefined)?.code ?? cause?.code;
  if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EHOSTUNREACH") {
    return `cannot reach Warren at ${url ?? "its URL"} (${code}): is the server running? (--url, WARREN_URL)`;
  }
  const message = err instanceof Error ? err.message : String(err);
  // The SDK wraps fetch failures as "fetch failed"; its cause says what happened.
  if (message === "fetch failed" && cause) return describeError(cause, url);
  return message.split("\n")[0] ?? message;
}

/** The server refused a call: its status, its own message and reason (`admin_required`, …). */
export class ApiError extends CliError {
  constructor(
    message: string,
    readonly status: number,
    readonly detail: string,
    readonly reason: string | undefined,
  ) {
    super(message);
    this.name = "ApiError";
  }
}
