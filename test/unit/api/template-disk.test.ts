// The template build API and the node's disk: minFreeDiskMb bounded by what the data dir's
// filesystem could ever hold; uploads and builds refused (507 disk_pressure) when they would
// leave less free disk than the reserve. The filesystem is a stand-in (an injected statfs).
import assert from "node:assert/strict";
import { test } from "node:test";
import { errorOf } from "./api-harness.js";
import { harness, requestBuild, uploadPath } from "./templates-harness.js";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

/** A data dir filesystem of `totalBytes` with `freeBytes` available. */
function disk(totalBytes: number, freeBytes: number) {
  return { diskReserveMiB: 1024, statDisk: () => ({ totalBytes, freeBytes }) };
}

test("minFreeDiskMb beyond what the node's disk could ever hold is a 400", async () => {
  const { call } = await harness(disk(100 * GiB, 50 * GiB));
  const request = (minFreeDiskMb: number) =>
    call("POST", "/v3/templates", { body: { name: "big", minFreeDiskMb } });
  for (const huge of [1024 * 1024, 200 * 1024]) {
    const res = await request(huge);
    assert.equal(res.statusCode, 400, res.body);
    // The filesystem's 100 GiB less the 1 GiB reserve.
    assert.match(errorOf(res).message, /minFreeDiskMb must be an integer from 1 to 101376/);
  }
  assert.equal((await request(2048)).statusCode, 202);
});

test("an upload that would leave less than the disk reserve is a 507, nothing stored", async () => {
  const { call } = await harness(disk(100 * GiB, 1024 * MiB + 500));
  const { templateID } = await requestBuild(call);
  const path = await uploadPath(call, templateID, "a".repeat(64));
  const refused = await call("PUT", path, { apiKey: null, body: "x".repeat(1000) });
  assert.equal(refused.statusCode, 507, refused.body);
  assert.equal(refused.json().reason, "disk_pressure");
  assert.match(errorOf(refused).message, /reserve/);
  const fits = await call("PUT", path, { apiKey: null, body: "x".repeat(100) });
  assert.equal(fits.statusCode, 201, fits.body);
});

test("a build is not started while the disk is down to its reserve: 507, still waiting", async () => {
  const { call } = await harness(disk(100 * GiB, 1024 * MiB));
  const { templateID, buildID } = await requestBuild(call);
  const start = await call("POST", `/v2/templates/${templateID}/builds/${buildID}`, {
    body: { steps: [{ type: "RUN", args: ["true"] }] },
  });
  assert.equal(start.statusCode, 507, start.body);
  assert.equal(start.json().reason, "disk_pressure");
  const status = await call("GET", `/templates/${templateID}/builds/${buildID}/status`);
  assert.equal((status.json() as { status: string }).status, "waiting");
});
