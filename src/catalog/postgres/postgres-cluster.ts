import { WarrenError } from "../../shared/index.js";
import type { SandboxState, TeamUsage } from "../catalog.js";
import {
  type ClusterCatalog,
  type ClusterSandboxRow,
  type DownNode,
  LOST_EVENT,
  type NodeCapacity,
  type NodeLoad,
  type NodeRegistration,
  type NodeRow,
  type NodeState,
  type SandboxLocation,
} from "../cluster.js";
import { toTeamUsage, type UsageRecord } from "../team-admission.js";
import type { TeamCatalog } from "../teams.js";
import { CatalogPool, type PoolOptions, rowsOf } from "./pool.js";
import { PostgresTeams } from "./postgres-teams.js";
import { ENQUEUE_DELIVERIES } from "./postgres-webhooks.js";
import { type SandboxRecord, toSandboxRow } from "./rows.js";
import { SQL as CATALOG_SQL } from "./statements.js";

interface NodeRecord {
  id: string;
  url: string;
  state: NodeState;
  capacity: NodeCapacity;
  labels: Record<string, string>;
  load: NodeLoad | null;
  registered_at: Date;
  last_heartbeat: Date;
  heartbeat_age_ms: number;
}

const NODE_STATES: ReadonlySet<string> = new Set(["up", "draining", "down"]);

/** Every node column plus its heartbeat's age by the database's clock (float8: a JS number). */
const NODE_COLUMNS =
  "*, (EXTRACT(EPOCH FROM now() - last_heartbeat) * 1000)::float8 AS heartbeat_age_ms";

const SQL = {
  registerNode: `
    INSERT INTO nodes (id, url, state, capacity, labels, load, registered_at, last_heartbeat)
    VALUES ($1, $2, 'up', $3::jsonb, $4::jsonb, NULL, now(), now())
    ON CONFLICT (id) DO UPDATE SET url = excluded.url, state = 'up',
      capacity = excluded.capacity, labels = excluded.labels, load = NULL,
      registered_at = now(), last_heartbeat = now()`,
  heartbeat: `
    UPDATE nodes SET load = $2::jsonb, last_heartbeat = now() WHERE id = $1 RETURNING state`,
  listNodes: `SELECT ${NODE_COLUMNS} FROM nodes ORDER BY id`,
  setNodeState: "UPDATE nodes SET state = $2 WHERE id = $1",
  // A row another gateway is marking waits for it, then fails `state <> 'down'`: one winner.
  markNodesDown: `
    UPDATE nodes SET state = 'down'
    WHERE state <> 'down' AND last_heartbeat < now() - $1 * interval '1 millisecond'
    RETURNING ${NODE_COLUMNS}`,
  // Locked first so that `was` is the state the row had when it was changed.
  markSandboxesLost: `
    WITH lost AS (
      SELECT s.id, s.state FROM sandboxes s
      WHERE s.node_id = ANY ($1::text[])
        AND (s.state IN ('creating', 'running', 'pausing', 'resuming', 'killing')
          OR (s.state = 'paused' AND NOT EXISTS (SELECT 1 FROM snapshots p
            WHERE p.id = s.snapshot_id AND p.published_at IS NOT NULL)))
      FOR UPDATE OF s
    )
    UPDATE sandboxes s SET state = 'killed', ended_reason = 'lost', updated_at = now()
    FROM lost WHERE s.id = lost.id
    RETURNING s.id, s.node_id, lost.state AS was`,
  // Each lost sandbox's history entry and its team's `killed` event (LOST_EVENT):
  // $1 ids, $2 the states they had, $3 kind, $4 lifecycle type, $5 reason.
  recordLost: `
    INSERT INTO events (sandbox_id, at, kind, detail, lifecycle, event_id, team_id)
    SELECT l.id, now(), $3, jsonb_build_object('state', l.was, 'reason', $5::text), $4,
      gen_random_uuid()::text, s.team_id
    FROM unnest($1::text[], $2::text[]) AS l(id, was) JOIN sandboxes s ON s.id = l.id
    RETURNING event_id`,
  locateSandbox: `
    SELECT s.node_id, n.url AS node_url, s.state, n.state AS node_state, s.ended_reason,
      s.vcpus, s.memory_mib, s.team_id
    FROM sandboxes s JOIN nodes n ON n.id = s.node_id WHERE s.id = $1`,
  listSandboxes: `
    SELECT * FROM sandboxes
    WHERE ($1::text[] IS NULL OR state = ANY ($1)) AND ($2::text IS NULL OR node_id = $2)
    ORDER BY started_at, id`,
  claimSandbox: `
    UPDATE sandboxes SET node_id = $2, updated_at = now()
    WHERE id = $1 AND state = 'paused' AND ($3::text IS NULL OR node_id = $3)
      AND EXISTS (SELECT 1 FROM snapshots p
        WHERE p.id = sandboxes.snapshot_id AND p.published_at IS NOT NULL)
    RETURNING id`,
  markPublished: `
    UPDATE snapshots SET published_at = COALESCE(published_at, now()) WHERE id = $1
    RETURNING id`,
} as const;

/**
 * The ClusterCatalog in the PostgreSQL database the nodes' PostgresCatalogs share. Opened
 * with a connection string alone (gateways have no node id); migrates like PostgresCatalog.
 */
export class PostgresCluster implements ClusterCatalog {
  readonly #db: CatalogPool;
  /** Teams and their keys (the gateway authenticates every request with them). */
  readonly teams: TeamCatalog;

  private constructor(db: CatalogPool) {
    this.#db = db;
    this.teams = new PostgresTeams(db);
  }

  static async open(options: PoolOptions): Promise<PostgresCluster> {
    return new PostgresCluster(await CatalogPool.open(options));
  }

  async registerNode(node: NodeRegistration): Promise<void> {
    await this.#db.query(`register node ${node.id}`, SQL.registerNode, [
      node.id,
      node.url,
      JSON.stringify(node.capacity),
      JSON.stringify(node.labels ?? {}),
    ]);
  }

  async heartbeat(id: string, load: NodeLoad): Promise<NodeState> {
    const context = `heartbeat of node ${id}`;
    const [row] = await this.#db.query<{ state: NodeState }>(context, SQL.heartbeat, [
      id,
      JSON.stringify(load),
    ]);
    if (!row) throw new WarrenError("not_found", `${context}: no such node; register it first`);
    return row.state;
  }

  async listNodes(): Promise<NodeRow[]> {
    return (await this.#db.query<NodeRecord>("list nodes", SQL.listNodes)).map(toNodeRow);
  }

  async setNodeState(id: string, state: NodeState): Promise<void> {
    const context = `set node ${id} ${state}`;
    if (!NODE_STATES.has(state)) {
      throw new WarrenError("invalid_argument", `${context}: state must be up, draining or down`);
    }
    await this.#db.query(context, SQL.setNodeState, [id, state]);
  }

  markDownStale(olderThanMs: number): Promise<DownNode[]> {
    const context = "mark stale nodes down";
    if (!(Number.isFinite(olderThanMs) && olderThanMs >= 0)) {
      return Promise.reject(
        new WarrenError("invalid_argument", `${context}: olderThanMs must be >= 0`),
      );
    }
    return this.#db.transaction(context, async (client) => {
      const nodes = (await rowsOf<NodeRecord>(client, SQL.markNodesDown, [olderThanMs])).map(
        toNodeRow,
      );
      if (nodes.length === 0) return [];
      const lost = await rowsOf<{ id: string; node_id: string; was: SandboxState }>(
        client,
        SQL.markSandboxesLost,
        [nodes.map((n) => n.id)],
      );
      lost.sort((x, y) => (x.id < y.id ? -1 : 1));
      const { kind, lifecycle, reason } = LOST_EVENT;
      const recorded = await rowsOf<{ event_id: string }>(client, SQL.recordLost, [
        lost.map((l) => l.id),
        lost.map((l) => l.was),
        kind,
        lifecycle,
        reason,
      ]);
      await client.query(ENQUEUE_DELIVERIES, [recorded.map((r) => r.event_id)]);
      return nodes
        .sort((x, y) => (x.id < y.id ? -1 : 1))
        .map((n) => ({
          ...n,
          lost: lost
            .filter((l) => l.node_id === n.id)
            .map((l) => ({ sandboxId: l.id, was: l.was })),
        }));
    });
  }

  async locateSandbox(id: string): Promise<SandboxLocation | undefined> {
    const [row] = await this.#db.query<{
      team_id: string;
      node_id: string;
      node_url: string;
      state: SandboxState;
      node_state: NodeState;
      ended_reason: string | null;
      vcpus: number;
      memory_mib: number;
    }>(`locate sandbox ${id}`, SQL.locateSandbox, [id]);
    if (!row) return undefined;
    return {
      teamId: row.team_id,
      nodeId: row.node_id,
      nodeUrl: row.node_url,
      state: row.state,
      nodeState: row.node_state,
      vcpus: row.vcpus,
      memoryMiB: row.memory_mib,
      ...(row.ended_reason !== null && { endedReason: row.ended_reason }),
    };
  }

  async listSandboxes(
    filter: { states?: readonly SandboxState[]; nodeId?: string } = {},
  ): Promise<ClusterSandboxRow[]> {
    const records = await this.#db.query<SandboxRecord>(
      "list sandboxes of the cluster",
      SQL.listSandboxes,
      [filter.states ?? null, filter.nodeId ?? null],
    );
    return records.map((r) => ({ ...toSandboxRow(r), nodeId: r.node_id }));
  }

  async teamUsage(teamId: string): Promise<TeamUsage> {
    // The node's own admission query, no sandbox of the team's set aside ("" is no id).
    const [usage] = await this.#db.query<UsageRecord>(
      `usage of team ${teamId}`,
      CATALOG_SQL.teamUsage,
      [teamId, ""],
    );
    return toTeamUsage(usage);
  }

  async claimSandbox(id: string, toNodeId: string, fromNodeId?: string): Promise<boolean> {
    const moved = await this.#db.query(`claim sandbox ${id} for ${toNodeId}`, SQL.claimSandbox, [
      id,
      toNodeId,
      fromNodeId ?? null,
    ]);
    return moved.length > 0;
  }

  async markPublished(snapshotId: string): Promise<boolean> {
    const marked = await this.#db.query(
      `mark snapshot ${snapshotId} published`,
      SQL.markPublished,
      [snapshotId],
    );
    return marked.length > 0;
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}

function toNodeRow(r: NodeRecord): NodeRow {
  return {
    id: r.id,
    url: r.url,
    state: r.state,
    capacity: r.capacity,
    labels: r.labels,
    ...(r.load !== null && { load: r.load }),
    registeredAt: r.registered_at.toISOString(),
    lastHeartbeat: r.last_heartbeat.toISOString(),
    heartbeatAgeMs: Math.max(0, r.heartbeat_age_ms),
  };
}
