// Template and snapshot names are per team: two teams may each have a `foo` and each creates
// from its own; another team's names read exactly as names nobody has, on every route that
// takes one; no team can take or move another's name, nor take a built-in one. The API on
// the real orchestrator over fakes (FakeNode) and the real TemplateBuilds; a build's result
// is captured from a sandbox as a finished build's would be (no build VM runs here).
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type TestContext, test } from "node:test";
import { createApi } from "../../../src/api/index.js";
import { TemplateBuilds } from "../../../src/builds/index.js";
import { DEFAULT_TEAM_ID } from "../../../src/catalog/index.js";
import { silentLogger } from "../../../src/shared/index.js";
import { newApiKey } from "../../../src/tenancy/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { InMemoryTeams } from "../../fakes/in-memory-teams.js";
import { TEST_ADMIN_TOKEN, testAuth } from "../../helpers/auth.js";

type Method = "GET" | "POST" | "PUT" | "DELETE";
interface Answer {
  readonly statusCode: number;
  readonly body: string;
  json(): unknown;
}

const HASH = "a".repeat(64);

/** A node of fakes with its build API, and the keys of teams `a` and `b`. */
async function twoTeams(t: TestContext) {
  const node = await FakeNode.start({ maxSandboxes: 32 });
  const dir = await mkdtemp(join(tmpdir(), "warren-template-names-"));
  const teams = new InMemoryTeams();
  const keys: Record<"a" | "b", string> = { a: "", b: "" };
  for (const team of ["a", "b"] as const) {
    await teams.putTeam({ id: team, name: team, createdAt: new Date().toISOString(), limits: {} });
    const { row, key } = newApiKey(team, "test");
    await teams.insertApiKey(row);
    keys[team] = key;
  }
  const builds = new TemplateBuilds({
    catalog: node.catalog,
    host: node.orchestrator,
    dir,
    logger: silentLogger,
    uploadLimitBytes: 64 * 1024,
    stepTimeoutMs: 5_000,
    readyTimeoutMs: 5_000,
    maxVcpus: 8,
    maxMemoryMiB: 8192,
  });
  const app = createApi({
    service: () => node.orchestrator,
    builds: () => builds,
    authenticate: testAuth(() => new Set(), teams),
  });
  t.after(async () => {
    await app.close();
    await builds.close();
    await node.close();
    await rm(dir, { recursive: true, force: true });
  });
  const call = (
    team: "a" | "b" | "admin",
    method: Method,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Answer> =>
    app.inject({
      method,
      url,
      headers: {
        ...(team === "admin" ? { "x-admin-token": TEST_ADMIN_TOKEN } : { "x-api-key": keys[team] }),
        ...headers,
      },
      ...(body === undefined ? {} : { payload: body as object }),
    });

  /** A running sandbox of the team's, from `base`. */
  const sandbox = async (team: "a" | "b") => {
    const res = await call(team, "POST", "/v2/sandboxes", { templateID: "base" });
    assert.equal(res.statusCode, 201, res.body);
    return (res.json() as { sandboxID: string }).sandboxID;
  };
  /** A persistent snapshot of a new sandbox of the team's, named `name`. */
  const snapshot = async (team: "a" | "b", name: string) => {
    const res = await call(team, "POST", `/sandboxes/${await sandbox(team)}/snapshots`, { name });
    assert.equal(res.statusCode, 201, `${team}'s snapshot ${name}: ${res.body}`);
    return (await node.catalog.getTemplate(name, team))?.id;
  };
  /** A build of `name` requested by the team (`POST /v3/templates`). */
  const requestBuild = async (team: "a" | "b", name: string) => {
    const res = await call(team, "POST", "/v3/templates", { name });
    assert.equal(res.statusCode, 202, `${team}'s build of ${name}: ${res.body}`);
    return res.json() as { templateID: string; buildID: string };
  };
  /** The requested build, finished as a build's publish leaves it (its capture, `default`). */
  const finishBuild = async (
    team: "a" | "b",
    name: string,
    requested: { templateID: string; buildID: string },
  ) => {
    const source = await node.orchestrator.create(createInput("base", { teamId: team }));
    const row = await node.orchestrator.captureTemplate(source.sandboxId, {
      id: requested.templateID,
      kind: "build",
      aliases: [name],
      teamId: team,
    });
    await node.orchestrator.kill(source.sandboxId);
    const build = await node.catalog.getBuild(requested.buildID);
    assert.ok(build);
    const now = new Date().toISOString();
    await node.catalog.putBuild({
      ...build,
      status: "ready",
      snapshotId: row.snapshotId,
      finishedAt: now,
    });
    for (const tag of ["default", "v1"]) {
      await node.catalog.putTag({
        templateId: requested.templateID,
        tag,
        buildId: requested.buildID,
        createdAt: now,
      });
    }
    return requested.templateID;
  };
  /** The template a create from `reference` by the team started from. */
  const createFrom = async (team: "a" | "b", reference: string) => {
    const res = await call(team, "POST", "/v2/sandboxes", { templateID: reference });
    assert.equal(res.statusCode, 201, `${team} creating from ${reference}: ${res.body}`);
    return (res.json() as { templateID: string }).templateID;
  };
  return { node, call, sandbox, snapshot, requestBuild, finishBuild, createFrom };
}

test("two teams may each have a `foo` (snapshot or build): each creates, finds and lists its own", async (t) => {
  const { call, snapshot, requestBuild, finishBuild, createFrom } = await twoTeams(t);
  const snapA = await snapshot("a", "foo");
  const snapB = await snapshot("b", "foo");
  assert.ok(snapA && snapB && snapA !== snapB);
  const buildA = await requestBuild("a", "bar");
  const buildB = await requestBuild("b", "bar");
  assert.notEqual(buildA.templateID, buildB.templateID);
  await finishBuild("a", "bar", buildA);
  await finishBuild("b", "bar", buildB);

  for (const [team, snap, built] of [
    ["a", snapA, buildA.templateID],
    ["b", snapB, buildB.templateID],
  ] as const) {
    assert.equal(await createFrom(team, "foo"), snap);
    assert.equal(await createFrom(team, "foo:default"), snap);
    assert.equal(await createFrom(team, "bar"), built);
    assert.equal(await createFrom(team, "bar:v1"), built);
    const alias = await call(team, "GET", "/templates/aliases/bar");
    assert.deepEqual(alias.json(), { templateID: built, public: false });
    const detail = await call(team, "GET", "/templates/bar");
    assert.equal((detail.json() as { templateID: string }).templateID, built);
    const listed = (await call(team, "GET", "/templates")).json() as { templateID: string }[];
    assert.deepEqual(
      listed.map((l) => l.templateID).filter((id) => id === snapA || id === snapB),
      [snap],
    );
    const snapshots = (await call(team, "GET", "/snapshots?name=foo")).json() as unknown[];
    assert.deepEqual(snapshots, [{ snapshotID: "foo:default", names: ["foo:default"] }]);
  }

  // The admin without X-Team-ID finds names in the default team (where its creates go);
  // with X-Team-ID, in that team.
  const asAdmin = await call("admin", "GET", "/templates/aliases/bar");
  assert.equal(asAdmin.statusCode, 404, asAdmin.body);
  const asB = await call("admin", "GET", "/templates/aliases/bar", undefined, {
    "x-team-id": "b",
  });
  assert.deepEqual(asB.json(), { templateID: buildB.templateID, public: false });

  // A delete by name finds the caller's own: B's `foo` is in use by B's sandboxes alone.
  const deleted = await call("b", "DELETE", "/templates/foo");
  assert.equal(deleted.statusCode, 409, deleted.body);
  assert.equal((deleted.json() as { reason: string }).reason, "template_in_use");
});

test("team B reads team A's names exactly as names nobody has, on every route", async (t) => {
  const { call, node, snapshot, requestBuild, finishBuild, createFrom } = await twoTeams(t);
  const snapA = await snapshot("a", "asnap");
  const builtA = await finishBuild("a", "abuilt", await requestBuild("a", "abuilt"));
  const pendingA = await requestBuild("a", "apending");
  const nobody = "zzzz";

  const probes: [Method, (name: string) => string, ((name: string) => unknown)?][] = [
    ["POST", () => "/v2/sandboxes", (n) => ({ templateID: n })],
    ["POST", () => "/v2/sandboxes", (n) => ({ templateID: `${n}:default` })],
    ["POST", () => "/v2/sandboxes", (n) => ({ templateID: `${n}:v1` })],
    ["POST", () => "/sandboxes", (n) => ({ templateID: n })],
    ["GET", (n) => `/templates/${n}`],
    ["GET", (n) => `/templates/aliases/${n}`],
    ["GET", (n) => `/templates/${n}/tags`],
    ["GET", (n) => `/templates/${n}/files/${HASH}`],
    ["GET", (n) => `/templates/${n}/builds/${pendingA.buildID}/status`],
    ["GET", (n) => `/templates/${n}/builds/${pendingA.buildID}/logs`],
    ["POST", (n) => `/v2/templates/${n}/builds/${pendingA.buildID}`, () => ({ steps: [] })],
    ["POST", () => "/templates/tags", (n) => ({ target: `${n}:default`, tags: ["x"] })],
    ["POST", () => "/templates/tags", (n) => ({ target: `${n}:v1`, tags: ["x"] })],
    ["DELETE", () => "/templates/tags", (n) => ({ name: n, tags: ["v1"] })],
    ["GET", (n) => `/snapshots?name=${n}`],
    ["GET", (n) => `/snapshots?name=${n}%3Adefault`],
    ["DELETE", (n) => `/templates/${n}`],
    ["DELETE", (n) => `/templates/${n}%3Adefault`],
  ];
  const shown = (res: Answer, name: string) =>
    `${res.statusCode} ${res.body.replaceAll(name, "NAME")}`;
  for (const name of ["asnap", "abuilt", "apending"]) {
    for (const [method, url, body] of probes) {
      const known = await call("b", method, url(name), body?.(name));
      const unknown = await call("b", method, url(nobody), body?.(nobody));
      const what = `${method} ${url(name)} ${JSON.stringify(body?.(name) ?? "")}`;
      assert.equal(shown(known, name), shown(unknown, nobody), what);
    }
  }
  // Lists: none of A's.
  const listed = (await call("b", "GET", "/templates")).json() as { names: string[] }[];
  assert.deepEqual(
    listed.flatMap((l) => l.names),
    ["base"],
  );
  assert.deepEqual((await call("b", "GET", "/snapshots")).json(), []);
  // A build from A's template fails as one from a name nobody has.
  const ownBuild = await requestBuild("b", "mine");
  const started = await call("b", "POST", `/v2/templates/mine/builds/${ownBuild.buildID}`, {
    fromTemplate: "asnap",
    steps: [{ type: "RUN", args: ["true"] }],
  });
  assert.equal(started.statusCode, 202, started.body);
  const reason = await waitForFailure(call, ownBuild);
  assert.match(reason, /template 'asnap' not found/);
  // Nothing of A's moved.
  assert.equal(await createFrom("a", "asnap"), snapA);
  assert.equal(await createFrom("a", "abuilt"), builtA);
  assert.equal((await node.catalog.getBuild(pendingA.buildID))?.status, "waiting");
});

test("no team takes or moves another team's name, nor a built-in one", async (t) => {
  const { call, node, snapshot, requestBuild, finishBuild, createFrom } = await twoTeams(t);
  // B first: A's own `foo` and `bar` are A's to make all the same.
  await snapshot("b", "foo");
  await requestBuild("b", "bar");
  const snapA = await snapshot("a", "foo");
  const barA = await requestBuild("a", "bar");
  assert.equal(await createFrom("a", "foo"), snapA);

  // A's build of `baz` is pending when B names a snapshot `baz`: A's `baz` stays A's, and
  // A's finished build takes nothing from B.
  const bazA = await requestBuild("a", "baz");
  const snapB = await snapshot("b", "baz");
  const builtA = await finishBuild("a", "baz", bazA);
  assert.equal(await createFrom("a", "baz"), builtA);
  assert.equal(await createFrom("b", "baz"), snapB);
  const builtBar = await finishBuild("a", "bar", barA);
  assert.equal(await createFrom("a", "bar"), builtBar);

  // Built-in names are every team's: no team names its template or snapshot like one,
  // present (base) or not (code-interpreter-v1 is not captured here).
  for (const name of ["base", "code-interpreter-v1"]) {
    const build = await call("b", "POST", "/v3/templates", { name });
    assert.equal(build.statusCode, 409, build.body);
    assert.equal((build.json() as { reason: string }).reason, "template_name_taken");
    assert.match((build.json() as { message: string }).message, /built-in/);
    const sandboxId = await (async () => {
      const res = await call("b", "POST", "/v2/sandboxes", { templateID: "base" });
      return (res.json() as { sandboxID: string }).sandboxID;
    })();
    const snap = await call("b", "POST", `/sandboxes/${sandboxId}/snapshots`, { name });
    assert.equal(snap.statusCode, 409, snap.body);
    assert.match((snap.json() as { message: string }).message, /built-in/);
  }
  // The default team (where the admin's builds go) is a team like any other.
  const admin = await call("admin", "POST", "/v3/templates", { name: "foo" });
  assert.equal(admin.statusCode, 202, admin.body);
  const { templateID } = admin.json() as { templateID: string };
  assert.equal((await node.catalog.listBuilds(templateID))[0]?.teamId, DEFAULT_TEAM_ID);
});

/** Polls a build's status until it failed; its reason. */
async function waitForFailure(
  call: (team: "b", method: Method, url: string) => Promise<Answer>,
  build: { templateID: string; buildID: string },
): Promise<string> {
  for (let i = 0; i < 200; i++) {
    const res = await call(
      "b",
      "GET",
      `/templates/${build.templateID}/builds/${build.buildID}/status`,
    );
    const body = res.json() as { status: string; reason?: { message: string } };
    if (body.status === "error") return body.reason?.message ?? "";
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error("the build never failed");
}
