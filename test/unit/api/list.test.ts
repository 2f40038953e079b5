import assert from "node:assert/strict";
import { test } from "node:test";
import { parseMetadataQuery } from "../../../src/api/metadata-query.js";
import { decodeNextToken, encodeNextToken } from "../../../src/api/pagination.js";
import type { ListFilter } from "../../../src/orchestrator/index.js";
import { errorOf, type Harness, useApi } from "./api-harness.js";

/** The filter the route handed the service for one request. */
async function filterFor(harness: Harness, url: string): Promise<ListFilter> {
  harness.service.calls.length = 0;
  const res = await harness.call("GET", url);
  assert.equal(res.statusCode, 200, res.body);
  return harness.service.callsOf("list")[0]?.[0] as ListFilter;
}

// GET /v2/sandboxes (paginated) and GET /sandboxes (v1: running only).

/** The `metadata` query value exactly as e2b 2.51's SandboxPaginator builds it. */
function sdkMetadataParam(metadata: Record<string, string>): string {
  const encodedPairs = Object.fromEntries(
    Object.entries(metadata).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)]),
  );
  return new URLSearchParams(encodedPairs).toString();
}

/** Then openapi-fetch puts it in the URL with encodeURIComponent. */
function listUrl(query: Record<string, string | number | undefined>): string {
  const parts = Object.entries(query)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`);
  return `/v2/sandboxes${parts.length > 0 ? `?${parts.join("&")}` : ""}`;
}

async function walk(
  call: Harness["call"],
  query: Record<string, string | number | undefined>,
): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let nextToken = query.nextToken === undefined ? undefined : String(query.nextToken);
  let pages = 0;
  do {
    const res = await call("GET", listUrl({ ...query, nextToken }));
    assert.equal(res.statusCode, 200, res.body);
    ids.push(...res.json().map((s: { sandboxID: string }) => s.sandboxID));
    const header = res.headers["x-next-token"];
    nextToken = typeof header === "string" && header !== "" ? header : undefined;
    pages++;
    assert.ok(pages < 100, "pagination does not end");
  } while (nextToken !== undefined);
  return { ids, pages };
}

/** Running and paused sandboxes, some sharing a start time, seeded out of order. */
function seedMixed(service: Harness["service"]): string[] {
  const t = (s: number) => new Date(Date.UTC(2030, 0, 1, 0, 0, s));
  const specs = [
    ["m2", 2, "paused"],
    ["a1", 1, "running"],
    ["z2", 2, "running"],
    ["b2", 2, "paused"],
    ["c3", 3, "running"],
    ["a4", 4, "paused"],
  ] as const;
  for (const [sandboxId, second, state] of specs) {
    service.seed({ sandboxId, startedAt: t(second), state });
  }
  return ["a1", "b2", "m2", "z2", "c3", "a4"]; // ascending by (startedAt, id)
}

test("limit 1 walks return every sandbox exactly once, in order, both directions", async () => {
  const { call, service } = useApi();
  const ascending = seedMixed(service);

  const asc = await walk(call, { limit: 1, order: "asc" });
  assert.deepEqual(asc.ids, ascending);
  assert.equal(asc.pages, ascending.length);

  const desc = await walk(call, { limit: 1 }); // default order is desc
  assert.deepEqual(desc.ids, [...ascending].reverse());

  const pairs = await walk(call, { limit: 2, order: "asc" });
  assert.deepEqual(pairs.ids, ascending);
  assert.equal(pairs.pages, 3);
});

test("the walk stays exact while sandboxes change state or go away between pages", async () => {
  const { call, service } = useApi();
  const ascending = seedMixed(service);
  const first = await call("GET", listUrl({ limit: 2, order: "asc" }));
  assert.deepEqual(
    first.json().map((s: { sandboxID: string }) => s.sandboxID),
    ["a1", "b2"],
  );
  const token = first.headers["x-next-token"] as string;
  // b2 (the cursor) is killed, m2 resumes, a new sandbox starts later.
  service.sandboxes.delete("b2");
  const m2 = service.sandboxes.get("m2");
  assert.ok(m2);
  m2.state = "running";
  service.seed({ sandboxId: "new5", startedAt: new Date(Date.UTC(2030, 0, 1, 0, 0, 5)) });
  const rest = await walk(call, { limit: 2, order: "asc", nextToken: token });
  assert.deepEqual(rest.ids, [...ascending.slice(2), "new5"]);
});

test("no X-Next-Token on the last page; X-Total-Running counts running sandboxes", async () => {
  const { call, service } = useApi();
  seedMixed(service);
  const res = await call("GET", "/v2/sandboxes");
  assert.equal(res.json().length, 6);
  assert.equal(res.headers["x-next-token"], undefined);
  assert.equal(res.headers["x-total-running"], "3");
});

test("default limit is 100", async () => {
  const { call, service } = useApi();
  for (let i = 0; i < 105; i++) service.seed();
  const res = await call("GET", "/v2/sandboxes");
  assert.equal(res.json().length, 100);
  assert.ok(res.headers["x-next-token"]);
});

test("state filter: comma-joined (as the SDK sends it) or repeated", async () => {
  const harness = useApi();
  const { call, service } = harness;
  seedMixed(service);
  const states = async (url: string) => {
    const res = await call("GET", url);
    assert.equal(res.statusCode, 200, res.body);
    return res.json().map((s: { state: string }) => s.state);
  };
  assert.deepEqual(await states("/v2/sandboxes?state=paused"), ["paused", "paused", "paused"]);
  assert.equal((await states("/v2/sandboxes?state=running,paused")).length, 6);
  assert.equal((await states("/v2/sandboxes?state=running&state=paused")).length, 6);
  assert.deepEqual(await states("/v2/sandboxes?state=running"), ["running", "running", "running"]);

  assert.deepEqual((await filterFor(harness, "/v2/sandboxes?state=paused")).states, ["paused"]);
  const both = await filterFor(harness, "/v2/sandboxes?state=running,paused,running");
  assert.deepEqual(both.states, ["running", "paused"]);

  const bad = await call("GET", "/v2/sandboxes?state=stopped");
  assert.equal(bad.statusCode, 400);
  assert.match(errorOf(bad).message, /^querystring\/state /);
});

test("metadata filter: the SDK's double encoding is undone exactly", async () => {
  const harness = useApi();
  const { call, service } = harness;
  const tricky = { "user id": "ann&bob=1", "path/x": "100% + ü", plain: "v" };
  service.seed({ sandboxId: "match", metadata: { ...tricky, extra: "x" } });
  service.seed({ sandboxId: "partial", metadata: { "user id": "ann&bob=1" } });
  service.seed({ sandboxId: "none" });

  const res = await call("GET", listUrl({ metadata: sdkMetadataParam(tricky) }));
  assert.equal(res.statusCode, 200, res.body);
  assert.deepEqual(
    res.json().map((s: { sandboxID: string }) => s.sandboxID),
    ["match"],
  );
  const filter = await filterFor(harness, listUrl({ metadata: sdkMetadataParam(tricky) }));
  assert.deepEqual(filter.metadata, tricky);

  const v1 = await call(
    "GET",
    `/sandboxes?metadata=${encodeURIComponent(sdkMetadataParam(tricky))}`,
  );
  assert.deepEqual(
    v1.json().map((s: { sandboxID: string }) => s.sandboxID),
    ["match"],
  );
});

test("parseMetadataQuery: infra's rules", () => {
  assert.deepEqual(parseMetadataQuery(""), {});
  assert.deepEqual(parseMetadataQuery(sdkMetadataParam({ a: "1", b: "" })), { a: "1", b: "" });
  assert.deepEqual(parseMetadataQuery("a=1&b=2"), { a: "1", b: "2" });
  assert.deepEqual(Object.keys(parseMetadataQuery("__proto__=x")), ["__proto__"]);
  for (const bad of ["a", "a=1=2", "=1", "a=1&", "%zz=1", "a=%E0%A4%A"]) {
    assert.throws(() => parseMetadataQuery(bad), /querystring\/metadata/, bad);
  }
});

test("other filters reach the service: template, startedAfter", async () => {
  const filter = await filterFor(
    useApi(),
    "/v2/sandboxes?template=python&startedAfter=2030-01-01T00:00:02.500Z",
  );
  assert.equal(filter.template, "python");
  assert.equal(filter.startedAfter?.toISOString(), "2030-01-01T00:00:02.500Z");
  assert.equal(filter.states, undefined);
});

test("invalid nextToken, limit, order are 400s naming the parameter", async () => {
  const { call, service } = useApi();
  seedMixed(service);
  const descToken = (await call("GET", "/v2/sandboxes?limit=1")).headers["x-next-token"] as string;
  const cases: [string, RegExp][] = [
    ["nextToken=garbage", /^querystring\/nextToken /],
    [`nextToken=${Buffer.from("x__y__asc").toString("base64url")}`, /^querystring\/nextToken /],
    [`nextToken=${descToken}&order=asc`, /^querystring\/nextToken was issued for order=desc/],
    ["limit=0", /^querystring\/limit must be between 1 and 100$/],
    ["limit=abc", /^querystring\/limit must be a non-negative integer$/],
    ["order=up", /^querystring\/order must be equal to one of the allowed values$/],
    ["startedAfter=2030-13-45", /^querystring\/startedAfter /],
  ];
  for (const [query, message] of cases) {
    const res = await call("GET", `/v2/sandboxes?${query}`);
    assert.equal(res.statusCode, 400, query);
    assert.match(errorOf(res).message, message);
  }
});

test("tokens round-trip and are opaque base64url", () => {
  const position = { startedAt: new Date("2030-01-01T00:00:01.000Z"), sandboxId: "abc" };
  const token = encodeNextToken(position, "asc");
  assert.match(token, /^[A-Za-z0-9_-]+$/);
  assert.deepEqual(decodeNextToken(token, "asc"), position);
  assert.throws(() => decodeNextToken(token, "desc"), /order=asc/);
});

test("v1 list: running sandboxes only, ListedSandbox shape", async () => {
  const { call, service } = useApi();
  seedMixed(service);
  service.seed({
    sandboxId: "aliased",
    alias: "my-alias",
    metadata: { k: "v" },
    startedAt: new Date(Date.UTC(2030, 0, 1, 0, 0, 9)),
  });
  const res = await call("GET", "/sandboxes");
  assert.equal(res.statusCode, 200);
  const items = res.json();
  assert.deepEqual(
    items.map((s: { sandboxID: string }) => s.sandboxID),
    ["a1", "z2", "c3", "aliased"],
  );
  const info = service.sandboxes.get("aliased");
  assert.ok(info);
  assert.deepEqual(items[3], {
    sandboxID: "aliased",
    templateID: "base",
    alias: "my-alias",
    clientID: "warren",
    state: "running",
    startedAt: info.startedAt.toISOString(),
    endAt: info.endAt.toISOString(),
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 2048,
    envdVersion: "0.6.4",
    volumeMounts: [],
    metadata: { k: "v" },
  });
});
