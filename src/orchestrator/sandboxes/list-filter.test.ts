import assert from "node:assert/strict";
import { test } from "node:test";
import type { SandboxRow } from "../../catalog/index.js";
import { matchesFilter } from "./list-filter.js";

const row = (startedAt: string): SandboxRow => ({
  id: "s1",
  teamId: "t1",
  templateId: "base",
  state: "running",
  clientId: "c",
  vcpus: 1,
  memoryMiB: 512,
  diskSizeMiB: 1024,
  metadata: {},
  envVars: {},
  config: {},
  startedAt,
  endAt: "2030-01-01T01:00:00.000Z",
  updatedAt: startedAt,
});

test("startedAfter includes a sandbox started at exactly that instant, not one before", () => {
  const at = "2030-01-01T00:00:02.500Z";
  const after = new Date(at);
  assert.equal(matchesFilter(row(at), { startedAfter: after }), true);
  assert.equal(matchesFilter(row("2030-01-01T00:00:02.501Z"), { startedAfter: after }), true);
  assert.equal(matchesFilter(row("2030-01-01T00:00:02.499Z"), { startedAfter: after }), false);
});
