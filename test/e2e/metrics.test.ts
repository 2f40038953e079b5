// The node's Prometheus endpoint, scraped and parsed while the SDK drives real
// sandboxes: counters move with the operations, gauges follow what the node holds.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Sandbox } from "e2b";
import { useServer, waitFor } from "../helpers/server.js";

const server = useServer({ WARREN_METRICS_INTERVAL_MS: "500" });

/** The samples of a scrape (`name{labels}` → value), or the refusal's status. */
async function scrape(apiKey: string | null = server.adminToken): Promise<Map<string, number>> {
  const res = await fetch(`${server.url}/metrics`, {
    headers: apiKey === null ? {} : { authorization: `Bearer ${apiKey}` },
  });
  assert.equal(res.status, 200, await res.clone().text());
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  const samples = new Map<string, number>();
  for (const line of (await res.text()).split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

const count = (samples: Map<string, number>, name: string) => samples.get(name) ?? 0;

describe("GET /metrics", () => {
  it("wants the admin token (a bearer token, as Prometheus sends, or X-Admin-Token)", async () => {
    const anonymous = await fetch(`${server.url}/metrics`);
    assert.equal(anonymous.status, 401);
    assert.equal(((await anonymous.json()) as { code: number }).code, 401);
    const wrong = await fetch(`${server.url}/metrics`, { headers: { "x-api-key": "nope" } });
    assert.equal(wrong.status, 401);
    // A team's key sees its own sandboxes, not the node's.
    const team = await fetch(`${server.url}/metrics`, {
      headers: { authorization: `Bearer ${server.apiKey}` },
    });
    assert.equal(team.status, 403);
    const header = await fetch(`${server.url}/metrics`, {
      headers: { "x-admin-token": server.adminToken },
    });
    assert.equal(header.status, 200);
    await scrape();
  });

  it("counts creates, pauses, resumes, forks, kills and API errors; gauges follow the node", async () => {
    const before = await scrape();
    const sandbox = await Sandbox.create();
    await waitFor("a background metrics sample", async () => {
      const now = await scrape();
      return [...now.keys()].some((k) =>
        k.startsWith(`warren_sandbox_cpu_used_percent{sandbox_id="${sandbox.sandboxId}"`),
      );
    });
    const running = await scrape();
    assert.ok(count(running, 'warren_sandboxes{state="running"}') >= 1);
    assert.ok(count(running, 'warren_capacity{resource="sandboxes",kind="limit"}') > 0);
    await sandbox.pause();
    await sandbox.connect();
    const [child] = await sandbox.fork({ count: 1 });
    assert.ok(child instanceof Sandbox);
    await child.kill();
    await sandbox.kill();
    assert.equal(await Sandbox.getInfo("doesnotexist0000").catch(() => "missing"), "missing");
    const after = await scrape();
    const moved = (name: string) => count(after, name) - count(before, name);
    assert.equal(moved('warren_sandbox_operations_total{op="create"}'), 1);
    assert.equal(moved('warren_sandbox_operations_total{op="pause"}'), 1);
    assert.equal(moved('warren_sandbox_operations_total{op="resume"}'), 1);
    assert.equal(moved('warren_sandbox_operations_total{op="fork"}'), 1);
    assert.equal(moved('warren_sandbox_operations_total{op="kill"}'), 2);
    assert.equal(moved('warren_fork_children_total{outcome="started"}'), 1);
    assert.equal(moved('warren_sandbox_ends_total{reason="killed"}'), 2);
    assert.equal(moved('warren_sandbox_operation_duration_seconds_count{op="create"}'), 1);
    assert.ok(moved('warren_api_errors_total{status="404",reason="sandbox_not_found"}') >= 1);
    const starts =
      moved('warren_vm_starts_total{pooled="true"}') +
      moved('warren_vm_starts_total{pooled="false"}');
    assert.equal(starts, 3, "create, resume and the child each brought a VM up");
    assert.equal(count(after, 'warren_sandboxes{state="running"}'), 0);
    assert.ok(after.has("warren_process_resident_memory_bytes"));
  });
});
