import type { Logger } from "./logger.js";

/**
 * What a process does with an error no code path caught, decided on purpose rather than
 * left to Node's default (print, exit 1, and for a rejection since Node 15 the same):
 *
 * - an **unhandled rejection** is one operation's failure its caller forgot to wait for: it
 *   is logged (`<component>.stray_rejection`, the error with its stack) and the process goes
 *   on — one request's mistake must not end every tenant's work;
 * - an **uncaught exception** unwound the stack through code whose state is now unknown:
 *   it is logged (`<component>.stray_exception`) and then `onException` says what follows.
 *   `"exit"`: the process ends with STRAY_EXCEPTION_EXIT, for its supervisor to start it
 *   again (systemd or the server for its helpers); `"continue"`: it goes on (envd: the
 *   guest's only agent, which nothing would start again).
 *
 * Returns what undoes it (tests).
 */
export function handleStrayErrors(
  logger: Logger,
  component: string,
  onException: "exit" | "continue",
  exit: (code: number) => void = (code) => process.exit(code),
): () => void {
  const onRejection = (reason: unknown) => {
    logger.error({ err: reason }, `${component}.stray_rejection`);
  };
  const onUncaught = (err: Error) => {
    logger.error({ err, policy: onException }, `${component}.stray_exception`);
    if (onException === "exit") exit(STRAY_EXCEPTION_EXIT);
  };
  process.on("unhandledRejection", onRejection);
  process.on("uncaughtException", onUncaught);
  return () => {
    process.off("unhandledRejection", onRejection);
    process.off("uncaughtException", onUncaught);
  };
}

/** The exit code of a process that ended on an uncaught exception (EX_SOFTWARE). */
export const STRAY_EXCEPTION_EXIT = 70;
