import type { Catalog } from "../catalog/index.js";
import type { OrchestratorParts } from "./assembly.js";

// A node in a cluster shares its catalog: other nodes (and gateways) change rows this one
// tracks. These bring its table in line with the rows, each sandbox under its lock.

/** Running sandboxes whose rows another node ended (killed, or gone: moved). Counts them. */
export async function reconcile(catalog: Catalog, p: OrchestratorParts): Promise<number> {
  let changed = 0;
  for (const live of p.table.values()) {
    const id = live.row.id;
    await p.table.serial(id, async () => {
      if (!p.table.has(id)) return;
      const row = await catalog.getSandbox(id);
      if (row && row.state !== "killed") return;
      changed += 1;
      p.events.emit("sandbox.reconciled", { sandboxId: id, state: row?.state ?? "moved" });
      if (row) await p.lifecycle.teardown(live, row.endedReason ?? "lost");
      else {
        await p.vms.release(live);
        p.table.remove(id);
      }
    });
  }
  return changed;
}

/** Paused rows now this node's taken in, and paused ones moved away let go. Counts both. */
export async function syncPaused(catalog: Catalog, p: OrchestratorParts): Promise<number> {
  const held = await catalog.listSandboxes(["paused"]);
  const heldIds = new Set(held.map((row) => row.id));
  let moved = 0;
  for (const row of held) if (await adoptPaused(catalog, p, row.id)) moved += 1;
  for (const live of p.table.values()) {
    const id = live.row.id;
    if (live.row.state !== "paused" || heldIds.has(id)) continue;
    await p.table.serial(id, async () => {
      if (!p.table.has(id) || live.row.state !== "paused") return;
      if (await catalog.getSandbox(id)) return;
      p.table.remove(id);
      moved += 1;
      p.events.emit("sandbox.moved_away", { sandboxId: id });
    });
  }
  return moved;
}

/** A paused sandbox whose row this node now holds (moved here), tracked. False if not. */
export async function adoptPaused(
  catalog: Catalog,
  p: OrchestratorParts,
  sandboxId: string,
): Promise<boolean> {
  if (p.table.has(sandboxId)) return false;
  return p.table.serial(sandboxId, async () => {
    if (p.table.has(sandboxId)) return false;
    const row = await catalog.getSandbox(sandboxId);
    if (row?.state !== "paused") return false;
    p.table.add({ row, metrics: [] });
    p.events.emit("sandbox.moved_here", { sandboxId });
    return true;
  });
}
