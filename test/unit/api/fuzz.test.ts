// Fuzz of the REST API (fast-check): random methods on every route, bad ids, bad query
// strings, random and malformed bodies, odd content types and headers, against the real
// orchestrator on fakes (FakeNode) and the template build API. Properties, for every
// request: the API answers (no throw out of fastify), with 2xx or E2B's error JSON whose
// `code` is the status, whose `reason` is documented (docs/errors.md) with that status, and
// no 5xx but the documented 503/507 (a 500 is a bug). After the run: /health still answers,
// and once every sandbox is killed the fakes hold nothing (VMMs, slots, runtime and snapshot
// dirs). The seed is printed; WARREN_FUZZ_SEED replays, WARREN_FUZZ_RUNS scales.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { LightMyRequestResponse } from "fastify";
import { createApi } from "../../../src/api/index.js";
import type { BuildHost } from "../../../src/builds/builder.js";
import { TemplateBuilds } from "../../../src/builds/index.js";
import {
  ERROR_KINDS,
  ERROR_REASONS,
  type ErrorKind,
  silentLogger,
  WarrenError,
} from "../../../src/shared/index.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { testAuth } from "../../helpers/auth.js";
import {
  fc,
  fuzzParameters,
  headerName,
  headerValue,
  nastyJson,
  nastyString,
  percentEncode,
  queryString,
  reportCases,
} from "../../helpers/fuzz.js";

const API_KEY = "e2b_fuzzfuzzfuzzfuzz";
const RUNS = 1000;

type Method = "GET" | "POST" | "PUT" | "DELETE" | "PATCH" | "HEAD" | "OPTIONS";

/** Every route of src/api/routes, with its placeholders; the fuzzer also picks other methods. */
const ROUTES: readonly (readonly [Method, string])[] = [
  ["GET", "/health"],
  ["POST", "/sandboxes"],
  ["POST", "/v2/sandboxes"],
  ["GET", "/sandboxes"],
  ["GET", "/v2/sandboxes"],
  ["GET", "/sandboxes/:id"],
  ["DELETE", "/sandboxes/:id"],
  ["POST", "/sandboxes/:id/pause"],
  ["POST", "/sandboxes/:id/resume"],
  ["POST", "/sandboxes/:id/connect"],
  ["POST", "/v2/sandboxes/:id/connect"],
  ["POST", "/sandboxes/:id/timeout"],
  ["POST", "/sandboxes/:id/refreshes"],
  ["GET", "/sandboxes/:id/metrics"],
  ["GET", "/sandboxes/:id/logs"],
  ["GET", "/v2/sandboxes/:id/logs"],
  ["PUT", "/sandboxes/:id/network"],
  ["POST", "/sandboxes/:id/fork"],
  ["POST", "/sandboxes/:id/snapshots"],
  ["GET", "/snapshots"],
  ["POST", "/v3/templates"],
  ["GET", "/templates/:tid/files/:hash"],
  ["PUT", "/templates/:tid/files/:hash"],
  ["POST", "/v2/templates/:tid/builds/:bid"],
  ["GET", "/templates/:tid/builds/:bid/status"],
  ["GET", "/templates/:tid/builds/:bid/logs"],
  ["GET", "/templates"],
  ["GET", "/templates/aliases/:alias"],
  ["GET", "/templates/:tid"],
  ["GET", "/templates/:tid/tags"],
  ["POST", "/templates/tags"],
  ["DELETE", "/templates/tags"],
  ["DELETE", "/templates/:tid"],
];

/** Body and query field names the routes read: random values for them reach deeper checks. */
const FIELDS = [
  "templateID",
  "timeout",
  "metadata",
  "envVars",
  "secure",
  "allow_internet_access",
  "autoPause",
  "autoPauseMemory",
  "autoResume",
  "network",
  "mcp",
  "volumeMounts",
  "iam",
  "memory",
  "duration",
  "count",
  "name",
  "alias",
  "tags",
  "target",
  "cpuCount",
  "memoryMB",
  "minFreeDiskMb",
  "allowOut",
  "denyOut",
  "fromImage",
  "steps",
  "startCmd",
];
const QUERY_KEYS = [
  "state",
  "metadata",
  "limit",
  "nextToken",
  "order",
  "template",
  "startedAfter",
  "start",
  "end",
  "cursor",
  "direction",
  "level",
  "search",
  "sandboxID",
  "name",
  "logsOffset",
  "signature",
  "expires",
];

interface FuzzRequest {
  readonly method: Method;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly payload?: string | Buffer;
}

const node = await FakeNode.start({ maxSandboxes: 6, maxForkCount: 3 });
const dir = await mkdtemp(join(tmpdir(), "warren-api-fuzz-"));
after(async () => {
  await node.close();
  await rm(dir, { recursive: true, force: true });
});

// Builds on the node's catalog with a host that starts no VM: a started build fails at once
// (builds that boot are e2e's); deleting a template is the orchestrator's own.
const noVms = (): never => {
  throw new WarrenError("unavailable", "this fuzz host runs no build VMs");
};
const host: BuildHost & { deleteTemplate(id: string): Promise<void> } = {
  templateShape: { vcpus: 1, memoryMiB: 512 },
  imagesFingerprint: node.images.fingerprint,
  baseRootfs: node.images.baseRootfs,
  findTemplate: noVms,
  guestEndpoint: noVms,
  captureTemplate: noVms,
  bootTemplate: noVms,
  dropTemplate: noVms,
  create: noVms,
  kill: noVms,
  deleteTemplate: (id) => node.orchestrator.deleteTemplate(id),
};
const builds = new TemplateBuilds({
  catalog: node.catalog,
  host,
  dir,
  logger: silentLogger,
  uploadLimitBytes: 64 * 1024,
  stepTimeoutMs: 5_000,
  readyTimeoutMs: 5_000,
  maxVcpus: 8,
  maxMemoryMiB: 8192,
});
await builds.start();
after(() => builds.close());

const app = createApi({
  service: () => node.orchestrator,
  builds: () => builds,
  authenticate: testAuth(() => new Set([API_KEY])),
  maxTimeoutMs: 3_600_000,
  bodyLimitBytes: 256 * 1024,
});
after(() => app.close());

/** Ids the run has seen (sandboxes, templates, builds), so that requests reach real objects. */
const known = { sandbox: ["nosuchsandbox"], template: ["base"], build: ["nosuchbuild"] };

const fromKnown = (kind: keyof typeof known) =>
  fc.nat().map((i) => known[kind][i % known[kind].length] as string);

const segment = (kind: keyof typeof known) =>
  fc.oneof(
    { weight: 10, arbitrary: fromKnown(kind) },
    { weight: 2, arbitrary: fc.stringMatching(/^[a-z0-9]{1,24}$/) },
    { weight: 2, arbitrary: nastyString.map(percentEncode) },
    {
      weight: 1,
      arbitrary: fc.constantFrom("..", "%2e%2e", "%00", "%ZZ", "a%2Fb", "x".repeat(500)),
    },
  );

const body = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  {
    weight: 5,
    arbitrary: fc
      .dictionary(fc.oneof(fc.constantFrom(...FIELDS), fc.string({ maxLength: 8 })), nastyJson, {
        maxKeys: 5,
      })
      .map((object) => JSON.stringify(object)),
  },
  { weight: 2, arbitrary: nastyJson.map((value) => JSON.stringify(value) ?? "null") },
  { weight: 1, arbitrary: fc.string({ maxLength: 50 }) },
  { weight: 1, arbitrary: fc.constant(`{"timeout": "${"9".repeat(300 * 1024)}"}`) },
);

const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant("application/json") },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      "application/json; charset=utf-8",
      "APPLICATION/JSON",
      "text/plain",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/octet-stream",
      "",
      "application/json; charset=utf-16",
    ),
  },
  { weight: 1, arbitrary: headerValue },
);

const request: fc.Arbitrary<FuzzRequest> = fc
  .record({
    route: fc.constantFrom(...ROUTES),
    // Mostly the route's own method, sometimes another (405/404 paths).
    otherMethod: fc.oneof(
      { weight: 7, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.constantFrom<Method>("GET", "POST", "PUT", "DELETE", "PATCH") },
    ),
    id: segment("sandbox"),
    tid: segment("template"),
    bid: segment("build"),
    hash: fc.oneof(fc.stringMatching(/^[0-9a-f]{64}$/), segment("build")),
    query: fc.option(queryString(QUERY_KEYS), { freq: 2 }),
    body,
    contentType,
    apiKey: fc.oneof(
      { weight: 8, arbitrary: fc.constant({ "x-api-key": API_KEY }) },
      { weight: 1, arbitrary: fc.constant({ authorization: `Bearer ${API_KEY}` }) },
      { weight: 1, arbitrary: headerValue.map((v) => ({ "x-api-key": v })) },
    ),
    extra: fc.dictionary(headerName, headerValue, { maxKeys: 3 }),
  })
  .map((r) => {
    const [routeMethod, template] = r.route;
    const path = template
      .replace(":id", r.id)
      .replace(":tid", r.tid)
      .replace(":bid", r.bid)
      .replace(":hash", r.hash)
      .replace(":alias", r.tid);
    const headers: Record<string, string> = { ...r.extra, ...r.apiKey };
    if (r.body !== undefined && r.contentType !== "") headers["content-type"] = r.contentType;
    return {
      method: r.otherMethod ?? routeMethod,
      url: r.query === null ? path : `${path}?${r.query}`,
      headers,
      ...(r.body === undefined ? {} : { payload: r.body }),
    };
  });

/** Every documented reason with the status its kind maps to. */
const REASON_STATUS = new Map<string, number>([
  ...Object.entries(ERROR_KINDS).map(([kind, spec]) => [kind, spec.status] as const),
  ...Object.entries(ERROR_REASONS).map(
    ([reason, spec]) => [reason, ERROR_KINDS[spec.kind as ErrorKind].status] as const,
  ),
]);
const DOCUMENTED_5XX = new Set([503, 507]);

/** The property of one response; throws what is wrong with it. */
function checkResponse(req: FuzzRequest, res: LightMyRequestResponse): void {
  const what = `${req.method} ${req.url.slice(0, 200)} → ${res.statusCode} ${res.body.slice(0, 300)}`;
  if (res.statusCode >= 200 && res.statusCode < 300) return;
  assert.ok(res.statusCode >= 400, `not 2xx nor an error: ${what}`);
  assert.ok(
    res.statusCode < 500 || DOCUMENTED_5XX.has(res.statusCode),
    `undocumented 5xx: ${what}`,
  );
  if (req.method === "HEAD") return; // no body to read
  let parsed: { code?: unknown; message?: unknown; reason?: unknown };
  try {
    parsed = JSON.parse(res.body);
  } catch {
    assert.fail(`error body is not JSON: ${what}`);
  }
  assert.equal(parsed.code, res.statusCode, `code is not the status: ${what}`);
  assert.equal(typeof parsed.message, "string", `no message: ${what}`);
  if (parsed.reason !== undefined) {
    assert.equal(REASON_STATUS.get(String(parsed.reason)), res.statusCode, `reason: ${what}`);
  }
}

/** Remembers the ids a successful answer names, so later requests reach them. */
function learn(res: LightMyRequestResponse): void {
  if (res.statusCode >= 300 || !res.body.startsWith("{")) return;
  const json = JSON.parse(res.body) as Record<string, unknown>;
  const add = (list: string[], id: unknown) => {
    if (typeof id === "string" && !list.includes(id) && list.length < 20) list.push(id);
  };
  add(known.sandbox, json.sandboxID);
  add(known.template, json.templateID);
  add(known.template, json.snapshotID);
  add(known.build, json.buildID);
}

test("fuzz: the REST API answers every bad request with 2xx or a documented error, and leaks nothing", async (t) => {
  // Something to act on from the start: one running sandbox and one paused.
  for (const pause of [false, true]) {
    const created = await app.inject({
      method: "POST",
      url: "/v2/sandboxes",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      payload: JSON.stringify({ templateID: "base", timeout: 600 }),
    });
    assert.equal(created.statusCode, 201, created.body);
    learn(created);
    if (pause) {
      const id = known.sandbox.at(-1) as string;
      const paused = await app.inject({
        method: "POST",
        url: `/sandboxes/${id}/pause`,
        headers: { "x-api-key": API_KEY },
      });
      assert.equal(paused.statusCode, 204, paused.body);
    }
  }

  let cases = 0;
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(request, async (req) => {
      cases++;
      const res = await app.inject(req);
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      checkResponse(req, res);
      learn(res);
    }),
    fuzzParameters(t, RUNS),
  );
  reportCases(t, "api", cases, statuses);

  const health = await app.inject({ method: "GET", url: "/health" });
  assert.equal(health.statusCode, 200, health.body);

  // Kill what the run left; then nothing may be held.
  await node.orchestrator.settled();
  for (const sandbox of await node.orchestrator.list({})) {
    await node.orchestrator.kill(sandbox.sandboxId).catch(() => {});
  }
  assert.deepEqual(await node.leaks(), []);
});
