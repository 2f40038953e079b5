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
