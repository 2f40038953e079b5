import pretty from "pino-pretty";

/**
 * Where a server's pino lines go (WARREN_LOG_FORMAT): stdout as JSON lines (collectors,
 * journald, the tests), or readable ones for a person at a terminal (auto: by whether
 * stdout is one). Undefined is pino's own JSON to stdout.
 */
export function logDestination(format: "auto" | "pretty" | "json") {
  const tty = process.stdout.isTTY === true;
  const readable = format === "pretty" || (format === "auto" && tty);
  return readable ? pretty({ sync: true, colorize: tty, ignore: "pid,hostname" }) : undefined;
}
