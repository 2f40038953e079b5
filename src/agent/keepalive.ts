/** Marker yielded by `withKeepalive` when the source stayed silent for a whole interval. */
export const KEEPALIVE = Symbol("keepalive");

/**
 * Interleaves keepalive markers into a stream whenever it is silent for `intervalMs`, so
 * proxies with idle timeouts keep long streams open. Ends when the source ends or `signal` aborts.
 */
export async function* withKeepalive<T>(
  source: AsyncIterable<T>,
  intervalMs: number,
  signal: AbortSignal,
): AsyncGenerator<T | typeof KEEPALIVE> {
  const iterator = source[Symbol.asyncIterator]();
  const aborted = new Promise<"aborted">((resolve) => {
    if (signal.aborted) resolve("aborted");
    signal.addEventListener("abort", () => resolve("aborted"), { once: true });
  });
  let pending = iterator.next();
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<"tick">((resolve) => {
        timer = setTimeout(() => resolve("tick"), intervalMs);
      });
      const next = await Promise.race([pending, tick, aborted]);
      clearTimeout(timer);
      if (next === "aborted") return;
      if (next === "tick") {
        yield KEEPALIVE;
        continue;
      }
      if (next.done) return;
      yield next.value;
      pending = iterator.next();
    }
  } finally {
    // Not awaited: a generator busy in next() would only answer return() after it.
    void iterator.return?.();
  }
}

/** The `Keepalive-Ping-Interval` header (seconds) as milliseconds; envd's default is 90 s. */
export function keepaliveIntervalMs(headers: Headers): number {
  const seconds = Number(headers.get("keepalive-ping-interval"));
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 90_000;
}
