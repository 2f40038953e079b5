/** pino-compatible: `logger.warn({ sandboxId, port, durationMs: 3 }, "proxy.upstream_error")`. */
export interface ProxyLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  debug(fields: Record<string, unknown>, message: string): void;
}

export const silentLogger: ProxyLogger = { info() {}, warn() {}, debug() {} };
