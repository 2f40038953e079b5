/**
 * What components log through. A line names an event and carries its fields:
 * `log.info({ sandboxId, durationMs: 41 }, "sandbox.created")`. The server hands each
 * component a pino child logger (pino's `Logger` satisfies this); tests pass `silentLogger`.
 */
export interface Logger {
  debug(fields: Record<string, unknown>, event: string): void;
  info(fields: Record<string, unknown>, event: string): void;
  warn(fields: Record<string, unknown>, event: string): void;
  error(fields: Record<string, unknown>, event: string): void;
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
