import type { TestServer } from "../../test/helpers/server.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** VMMs ready in the server's warm pool (its /health, as an admin). */
export async function pooled(server: TestServer): Promise<number> {
  const res = await fetch(`${server.url}/health`, {
    headers: { "x-admin-token": server.adminToken },
  });
  const health = (await res.json()) as { pooledVmms?: number };
  return health.pooledVmms ?? 0;
}

/**
 * Waits (up to 60 s) until the warm pool holds `size` VMMs again: a refill restores and warms
 * VMMs on the same cores, so what is timed meanwhile measures the refill too.
 */
export async function poolRefilled(server: TestServer, size: number): Promise<void> {
  for (let i = 0; i < 600 && (await pooled(server)) < size; i++) await sleep(100);
}

/**
 * Waits until the warm pool holds at least `floor` VMMs and has not grown for `quietMs`
 * (at most `timeoutMs`), and gives its size: a pool sized from demand (the server's
 * defaults) grows after a burst, and a create timed while it still warms VMMs on the same
 * cores measures the refill too.
 */
export async function poolSettled(
  server: TestServer,
  { floor = 1, quietMs = 5_000, timeoutMs = 180_000 } = {},
): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  let size = await pooled(server);
  let stableSince = performance.now();
  while (performance.now() < deadline) {
    await sleep(250);
    const now = await pooled(server);
    if (now !== size) {
      size = now;
      stableSince = performance.now();
    } else if (size >= floor && performance.now() - stableSince >= quietMs) {
      break;
    }
  }
  return size;
}
