// The template build routes on TemplateBuilds over the in-memory catalog, with a host that
// runs no VMs (a STAND-IN: builds that would start one are covered by
// test/e2e/template-build.test.ts). What is checked here: the wire shapes, signed uploads,
// and every refusal with its status and reason.
import assert from "node:assert/strict";
import { test } from "node:test";
import { errorOf, useApi } from "./api-harness.js";
import { harness, requestBuild } from "./templates-harness.js";

test("a build request answers E2B's TemplateRequestResponseV3, one template id per name", async () => {
  const { call } = await harness();
  const first = await requestBuild(call);
  assert.deepEqual(first.names, ["my-env"]);
  assert.deepEqual(first.tags, ["default"]);
  assert.match(first.templateID, /^[a-z0-9]{20}$/);
  const again = await requestBuild(call);
  assert.equal(again.templateID, first.templateID);
  assert.notEqual(again.buildID, first.buildID);
  const tagged = await call("POST", "/v3/templates", { body: { name: "other:v1", tags: ["x"] } });
  assert.deepEqual((tagged.json() as { tags: string[] }).tags, ["x", "v1"]);
});

test("a build request is refused for a bad name, a taken name or a bad shape", async () => {
  const { call } = await harness();
  const bad = await call("POST", "/v3/templates", { body: { name: "Has Spaces" } });
  assert.equal(bad.statusCode, 400);
  assert.match(errorOf(bad).message, /template name/);
  const taken = await call("POST", "/v3/templates", { body: { name: "base" } });
  assert.equal(taken.statusCode, 409);
  assert.equal(taken.json().reason, "template_name_taken");
  const big = await call("POST", "/v3/templates", { body: { name: "x", cpuCount: 99 } });
  assert.equal(big.statusCode, 400);
  assert.match(errorOf(big).message, /cpuCount must be an integer from 1 to 8/);
  const noName = await call("POST", "/v3/templates", { body: {} });
  assert.equal(noName.statusCode, 400);
});

test("files upload through a signed link without an API key, once", async () => {
  const { call } = await harness();
  const { templateID } = await requestBuild(call);
  const hash = "e".repeat(64);
  const link = await call("GET", `/templates/${templateID}/files/${hash}`);
  assert.equal(link.statusCode, 201);
  const { present, url } = link.json() as { present: boolean; url: string };
  assert.equal(present, false);
  const path = new URL(url).pathname + new URL(url).search;

  const forged = await call(
    "PUT",
    path.replace(/signature=[0-9a-f]+/, `signature=${"0".repeat(64)}`),
    {
      apiKey: null,
      body: "tar",
      headers: { "content-type": "application/gzip" },
    },
  );
  assert.equal(forged.statusCode, 401);
  assert.equal(forged.json().reason, "upload_link_invalid");

  const put = await call("PUT", path, { apiKey: null, body: "tar bytes" });
  assert.equal(put.statusCode, 201, put.body);
  const again = await call("GET", `/templates/${templateID}/files/${hash}`);
  assert.deepEqual(again.json(), { present: true });

  const tooBig = await call("GET", `/templates/${templateID}/files/${"f".repeat(64)}`);
  const bigUrl = new URL((tooBig.json() as { url: string }).url);
  const over = await call("PUT", bigUrl.pathname + bigUrl.search, {
    apiKey: null,
    body: "x".repeat(2048),
    headers: { "content-type": "application/octet-stream" },
  });
  assert.equal(over.statusCode, 413);
});

test("starting a build refuses what it cannot build before anything runs", async () => {
  const { call } = await harness();
  const { templateID, buildID } = await requestBuild(call);
  const start = (body: unknown) =>
    call("POST", `/v2/templates/${templateID}/builds/${buildID}`, { body });
  const unsupported = await start({
    steps: [
      { type: "RUN", args: ["true"] },
      { type: "ONBUILD", args: [] },
    ],
  });
  assert.equal(unsupported.statusCode, 400);
  assert.equal(unsupported.json().reason, "build_invalid");
  assert.match(errorOf(unsupported).message, /^step 2: unsupported step type "ONBUILD"/);
  const missing = await start({
    steps: [{ type: "COPY", args: ["app", "/app"], filesHash: "a".repeat(64) }],
  });
  assert.equal(missing.statusCode, 400);
  assert.match(errorOf(missing).message, /step 1 \(COPY app\): its files .* were not uploaded/);
  const status = await call("GET", `/templates/${templateID}/builds/${buildID}/status`);
  assert.equal(status.statusCode, 200);
  assert.equal(
    (status.json() as { status: string }).status,
    "waiting",
    "a refused start changes nothing",
  );
});

test("a step with wrong arguments is taken, then fails at that step (as E2B's builds do)", async () => {
  const { call } = await harness();
  const { templateID, buildID } = await requestBuild(call);
  const start = await call("POST", `/v2/templates/${templateID}/builds/${buildID}`, {
    body: { steps: [{ type: "USER", args: [";"] }] },
  });
  assert.equal(start.statusCode, 202, start.body);
  const status = await call("GET", `/templates/${templateID}/builds/${buildID}/status`);
  const body = status.json() as { status: string; reason?: { message: string; step?: string } };
  assert.equal(body.status, "error");
  // The SDK reads the step to point its BuildError's stack at the setUser() call.
  assert.equal(body.reason?.step, "1");
  assert.match(body.reason?.message ?? "", /step 1 \(USER\): ';' is not a user name/);
});

test("unknown builds, names and tags are 404s with their reasons", async () => {
  const { call } = await harness();
  const { templateID } = await requestBuild(call);
  const build = await call("GET", `/templates/${templateID}/builds/nope/status`);
  assert.equal(build.statusCode, 404);
  assert.equal(build.json().reason, "build_not_found");
  const alias = await call("GET", "/templates/aliases/nope");
  assert.equal(alias.statusCode, 404);
  const baseAlias = await call("GET", "/templates/aliases/base");
  assert.deepEqual(baseAlias.json(), { templateID: "basetemplateid000000", public: false });
  const tags = await call("POST", "/templates/tags", {
    body: { target: "nope:default", tags: ["a"] },
  });
  assert.equal(tags.statusCode, 404);
  const badOffset = await call("GET", `/templates/${templateID}/builds/x/status?logsOffset=-1`);
  assert.equal(badOffset.statusCode, 400);
});

test("lists base and templates still building; a template's builds are listed with it", async () => {
  const { call } = await harness();
  const { templateID, buildID } = await requestBuild(call);
  const list = (await call("GET", "/templates")).json() as {
    names: string[];
    buildStatus: string;
  }[];
  assert.deepEqual(
    list.map((t) => [t.names, t.buildStatus]),
    [
      [["base"], "ready"],
      [["my-env"], "waiting"],
    ],
  );
  const detail = (await call("GET", `/templates/${templateID}`)).json() as {
    builds: { buildID: string; cpuCount: number; memoryMB: number }[];
  };
  assert.deepEqual(
    detail.builds.map((b) => [b.buildID, b.cpuCount, b.memoryMB]),
    [[buildID, 2, 1024]],
  );
});

test("without a build service the template routes answer 503", async () => {
  const { call } = useApi();
  const res = await call("POST", "/v3/templates", { body: { name: "x" } });
  assert.equal(res.statusCode, 503);
});

test("a build the server was running when it stopped is reported failed at the next start", async () => {
  const { call, catalog, builds } = await harness();
  const { templateID, buildID } = await requestBuild(call);
  const build = await catalog.getBuild(buildID);
  assert.ok(build);
  await catalog.putBuild({ ...build, status: "building" });
  await builds.start();
  const status = await call("GET", `/templates/${templateID}/builds/${buildID}/status`);
  const body = status.json() as { status: string; reason?: { message: string } };
  assert.equal(body.status, "error");
  assert.match(body.reason?.message ?? "", /restarted before the build finished/);
});
