// `warren cluster init-ca|issue`, the bundle as operators run it (no server needed): a CA,
// then the directories a node's and a gateway's WARREN_CLUSTER_TLS_DIR hold, which load as
// those members' credentials; mistakes are refused with a line and an exit code.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { loadClusterCredentials } from "../../../src/tls/index.js";

const WARREN = join(import.meta.dirname, "..", "..", "..", "dist", "cli", "warren.mjs");

function warren(...args: string[]) {
  const run = spawnSync(process.execPath, [WARREN, ...args], { encoding: "utf8" });
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

it("makes a CA and issues a node's and a gateway's directories that load as theirs", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "warren-cli-cluster-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const ca = join(dir, "ca");
  assert.equal(warren("cluster", "init-ca", ca).code, 0);
  assert.equal((await stat(join(ca, "ca.key"))).mode & 0o777, 0o600);
  const node = warren("cluster", "issue", ca, "--node", "node-7", "--out", join(dir, "n7"));
  assert.equal(node.code, 0, node.stderr);
  assert.match(node.stdout, /warren-node:node-7 until/);
  const gateway = warren("cluster", "issue", ca, "--gateway", "--out", join(dir, "gw"));
  assert.equal(gateway.code, 0, gateway.stderr);
  const loaded = await loadClusterCredentials(join(dir, "n7"), "node", "node-7");
  assert.deepEqual(loaded.identity, { role: "node", name: "node-7" });
  const gw = await loadClusterCredentials(join(dir, "gw"), "gateway");
  assert.deepEqual(gw.identity, { role: "gateway", name: "gateway" });

  const again = warren("cluster", "init-ca", ca);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /^warren: .*already there/);
  const nobody = warren("cluster", "issue", ca, "--out", join(dir, "x"));
  assert.equal(nobody.code, 2);
  assert.match(nobody.stderr, /--node <id> or --gateway/);
  const badName = warren("cluster", "issue", ca, "--node", "Node_1", "--out", join(dir, "x"));
  assert.equal(badName.code, 1);
  assert.match(badName.stderr, /no cluster name/);
});
