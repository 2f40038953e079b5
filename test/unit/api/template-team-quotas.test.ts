// A team's template build quotas: its builds in flight (maxBuilds) and the bytes its
// templates' uploads hold (maxUploadBytes, under the node's WARREN_BUILD_UPLOADS_MAX_MIB):
// over either, 429 quota_exceeded naming it, nothing stored or started.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DEFAULT_TEAM_ID, type TeamLimits } from "../../../src/catalog/index.js";
import { harness, isPresent, requestBuild, uploadPath } from "./templates-harness.js";

const HASH = "7".repeat(64);
const limitsOf = (limits: TeamLimits) => async (team: string) =>
  team === DEFAULT_TEAM_ID ? limits : undefined;

test("an upload past the team's maxUploadBytes is a 429 naming it, nothing stored", async () => {
  const { call } = await harness({ teamLimits: limitsOf({ maxUploadBytes: 8 }) });
  const { templateID } = await requestBuild(call);
  const put = await call("PUT", await uploadPath(call, templateID, HASH), {
    apiKey: null,
    body: "more than eight bytes",
  });
  assert.equal(put.statusCode, 429, put.body);
  assert.equal(put.json().reason, "quota_exceeded");
  assert.match(put.json().message, /upload bytes/);
  assert.equal(await isPresent(call, templateID, HASH), false);
});

test("a build start past the team's maxBuilds is a 429, the build left waiting", async () => {
  const { call } = await harness({ findsBase: true, teamLimits: limitsOf({ maxBuilds: 0 }) });
  const { templateID, buildID } = await requestBuild(call);
  const started = await call("POST", `/v2/templates/${templateID}/builds/${buildID}`, {
    body: { fromTemplate: "base", steps: [{ type: "RUN", args: ["true"] }] },
  });
  assert.equal(started.statusCode, 429, started.body);
  assert.equal(started.json().reason, "quota_exceeded");
  assert.match(started.json().message, /builds in flight/);
  const status = await call("GET", `/templates/${templateID}/builds/${buildID}/status`);
  assert.equal((status.json() as { status: string }).status, "waiting");
});
