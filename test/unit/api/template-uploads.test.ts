// A COPY's uploaded files as tenants could abuse them: one template's upload is never
// another's files nor another's cached layer, a Content-Digest is checked against the bytes,
// uploads have a quota and are collected. On TemplateBuilds over the in-memory catalog with a
// host that runs no VMs (templates-harness.ts).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import type { TemplateRow } from "../../../src/catalog/index.js";
import { InMemoryCatalog } from "../../fakes/in-memory-catalog.js";
import { errorOf } from "./api-harness.js";
import { harness, isPresent, requestBuild, uploadPath } from "./templates-harness.js";

/** The files hash the SDK computes (of `COPY src dest`, paths, modes, sizes and contents). */
const HASH = "5".repeat(64);
const OTHER = "6".repeat(64);

/** Records the layer ids builds look up in the cache. */
class LayerLookups extends InMemoryCatalog {
  readonly ids: string[] = [];
  override async getTemplate(idOrAlias: string): Promise<TemplateRow | undefined> {
    if (/^l[0-9a-f]{19}$/.test(idOrAlias)) this.ids.push(idOrAlias);
    return super.getTemplate(idOrAlias);
  }
}

async function finished(
  call: Awaited<ReturnType<typeof harness>>["call"],
  templateId: string,
  buildId: string,
): Promise<{ status: string; reason?: { message: string; step?: string } }> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const res = await call("GET", `/templates/${templateId}/builds/${buildId}/status`);
    const body = res.json() as { status: string; reason?: { message: string; step?: string } };
    if (body.status !== "building" && body.status !== "waiting") return body;
    if (Date.now() > deadline) assert.fail(`build ${buildId} still ${body.status}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("an upload through one template's link is never another template's files", async () => {
  const { call } = await harness();
  const attacker = await requestBuild(call, "attacker");
  const victim = await requestBuild(call, "victim");
  const put = await call("PUT", await uploadPath(call, attacker.templateID, HASH), {
    apiKey: null,
    body: "the attacker's archive",
  });
  assert.equal(put.statusCode, 201, put.body);
  assert.equal(await isPresent(call, attacker.templateID, HASH), true);
  // The victim's SDK would skip its own upload and COPY the attacker's files.
  assert.equal(
    await isPresent(call, victim.templateID, HASH),
    false,
    "the victim is asked for its own files",
  );
});

test("a COPY layer made from one template's upload is never the cache of another's", async () => {
  const catalog = new LayerLookups();
  const { call } = await harness({ catalog, findsBase: true });
  const definition = {
    fromTemplate: "base",
    steps: [{ type: "COPY", args: ["app", "/app"], filesHash: HASH }],
  };
  const lookups: string[][] = [];
  for (const [name, bytes] of [
    ["attacker", "the attacker's archive"],
    ["victim", "the victim's archive"],
  ]) {
    // No shape: a build from `base` as it is.
    const requested = await call("POST", "/v3/templates", { body: { name } });
    const { templateID, buildID } = requested.json() as { templateID: string; buildID: string };
    if (!(await isPresent(call, templateID, HASH))) {
      const put = await call("PUT", await uploadPath(call, templateID, HASH), {
        apiKey: null,
        body: bytes,
      });
      assert.equal(put.statusCode, 201, put.body);
    }
    catalog.ids.length = 0;
    const start = await call("POST", `/v2/templates/${templateID}/builds/${buildID}`, {
      body: definition,
    });
    assert.equal(start.statusCode, 202, start.body);
    // The stand-in host starts no VM: the build fails at the COPY, after its cache lookup.
    const status = await finished(call, templateID, buildID);
    assert.equal(status.reason?.step, "1", JSON.stringify(status));
    lookups.push([...catalog.ids]);
  }
  const [attacker, victim] = lookups;
  assert.ok(attacker?.length && victim?.length, "both builds looked the COPY's layer up");
  assert.notDeepEqual(victim, attacker, "the victim's COPY does not find the attacker's layer");
});

test("an upload whose bytes differ from its Content-Digest is refused and nothing is stored", async () => {
  const { call } = await harness();
  const { templateID } = await requestBuild(call);
  const path = await uploadPath(call, templateID, HASH);
  const digest = (text: string) =>
    `sha-256=:${createHash("sha256").update(text).digest("base64")}:`;
  const bad = await call("PUT", path, {
    apiKey: null,
    body: "tar bytes",
    headers: { "content-digest": digest("other bytes") },
  });
  assert.equal(bad.statusCode, 400, bad.body);
  assert.match(errorOf(bad).message, /do not match its Content-Digest/);
  assert.equal(await isPresent(call, templateID, HASH), false, "nothing was stored");
  const good = await call("PUT", path, {
    apiKey: null,
    body: "tar bytes",
    headers: { "content-digest": digest("tar bytes") },
  });
  assert.equal(good.statusCode, 201, good.body);
  assert.equal(await isPresent(call, templateID, HASH), true);
});

test("uploads are bounded in total: over the quota a 429 quota_exceeded, nothing stored", async () => {
  const { call } = await harness({ uploadLimitBytes: 1024, uploadQuotaBytes: 1500 });
  const one = await requestBuild(call, "one");
  const two = await requestBuild(call, "two");
  const first = await call("PUT", await uploadPath(call, one.templateID, HASH), {
    apiKey: null,
    body: "x".repeat(1000),
  });
  assert.equal(first.statusCode, 201, first.body);
  const over = await call("PUT", await uploadPath(call, two.templateID, OTHER), {
    apiKey: null,
    body: "y".repeat(1000),
  });
  assert.equal(over.statusCode, 429, over.body);
  assert.equal(over.json().reason, "quota_exceeded");
  assert.match(errorOf(over).message, /upload bytes/);
  assert.equal(await isPresent(call, two.templateID, OTHER), false, "nothing was stored");
  // Deleting a template collects its uploads: the room is back.
  const deleted = await call("DELETE", `/templates/${one.templateID}`);
  assert.equal(deleted.statusCode, 204, deleted.body);
  const again = await call("PUT", await uploadPath(call, two.templateID, OTHER), {
    apiKey: null,
    body: "y".repeat(1000),
  });
  assert.equal(again.statusCode, 201, again.body);
});

test("uploads no build uses are collected after the retention, at start", async () => {
  const { call, builds } = await harness({ uploadRetentionMs: 50 });
  const { templateID } = await requestBuild(call);
  const put = await call("PUT", await uploadPath(call, templateID, HASH), {
    apiKey: null,
    body: "tar bytes",
  });
  assert.equal(put.statusCode, 201, put.body);
  await new Promise((resolve) => setTimeout(resolve, 150));
  await builds.start();
  assert.equal(await isPresent(call, templateID, HASH), false, "collected");
});
