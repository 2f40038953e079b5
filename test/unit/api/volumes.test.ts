// Volumes over the API, on a real SQLite catalog and a real directory: E2B's `/volumes`
// (names, teams, tokens) and the content API behind each volume's own token.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { SqliteCatalog } from "../../../src/catalog/index.js";
import { TeamAdmin } from "../../../src/tenancy/index.js";
import { Volumes } from "../../../src/volumes/index.js";
import { TEST_ADMIN_TOKEN, testAuth } from "../../helpers/auth.js";
import { API_KEY, errorOf, type Harness, useApi } from "./api-harness.js";

const PYTHON = "/usr/bin/python3";

describe("volumes API", () => {
  const dir = mkdtempSync(join(tmpdir(), "warren-volumes-api-"));
  const volumesDir = join(dir, "volumes");
  let catalog: SqliteCatalog;
  let api: Harness;
  let keyB: string;
  /** What the node would say mounts each volume (the catalog's sandbox rows, in the server). */
  const mountedBy = new Map<string, string[]>();

  before(async () => {
    catalog = await SqliteCatalog.open(join(dir, "catalog.sqlite"));
    const teams = catalog.teams;
    const volumes = new Volumes({
      catalog: catalog.volumes,
      dir: volumesDir,
      mountedBy: async (id) => mountedBy.get(id) ?? [],
    });
    const admin = new TeamAdmin(teams, { count: async () => 0, killAll: async () => {} });
    api = useApi({
      authenticate: testAuth(() => new Set([API_KEY]), teams),
      teamAdmin: () => admin,
      volumes: () => volumes,
    });
    const made = await api.call("POST", "/admin/teams", {
      apiKey: null,
      headers: { "x-admin-token": TEST_ADMIN_TOKEN },
      body: { name: "b" },
    });
    keyB = (made.json() as { apiKey: string }).apiKey;
  });

  after(async () => {
    await catalog.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const content = (
    method: "GET" | "POST" | "PUT" | "DELETE" | "PATCH",
    volume: { volumeID: string; token: string },
    what: string,
    query: Record<string, string>,
    options: { body?: string | object; token?: string } = {},
  ) =>
    api.app.inject({
      method,
      url: `/volumecontent/${volume.volumeID}/${what}?${new URLSearchParams(query)}`,
      headers: {
        authorization: `Bearer ${options.token ?? volume.token}`,
        ...(typeof options.body === "string" && { "content-type": "application/octet-stream" }),
      },
      ...(options.body !== undefined && { payload: options.body }),
    });

  it("creates, lists, gets and destroys volumes of the caller's team", async () => {
    const created = await api.call("POST", "/volumes", { body: { name: "data_1-x" } });
    assert.equal(created.statusCode, 201);
    const volume = created.json() as { volumeID: string; name: string; token: string };
    assert.equal(volume.name, "data_1-x");
    assert.match(volume.volumeID, /^[0-9a-f-]{36}$/);
    assert.ok(volume.token.length >= 40);
    assert.equal(statSync(volumesDir).mode & 0o777, 0o700, "no other account reaches volumes");

    const listed = await api.call("GET", "/volumes");
    assert.deepEqual(listed.json(), [{ volumeID: volume.volumeID, name: "data_1-x" }]);
    const got = await api.call("GET", `/volumes/${volume.volumeID}`);
    const { token, ...rest } = got.json() as typeof volume;
    assert.deepEqual({ ...rest, token: volume.token }, volume);
    assert.match(token, /^wvt1\.\d+\.[\w-]{43}$/, "a token of its own, signed");

    // Another team: none of it visible, its own name space.
    assert.deepEqual((await api.call("GET", "/volumes", { apiKey: keyB })).json(), []);
    for (const method of ["GET", "DELETE"] as const) {
      const res = await api.call(method, `/volumes/${volume.volumeID}`, { apiKey: keyB });
      assert.equal(res.statusCode, 404, method);
    }
    const same = await api.call("POST", "/volumes", { apiKey: keyB, body: { name: "data_1-x" } });
    assert.equal(same.statusCode, 201, "names are per team");

    const again = await api.call("POST", "/volumes", { body: { name: "data_1-x" } });
    assert.equal(again.statusCode, 409);
    assert.match(errorOf(again).message, /already has a volume named 'data_1-x'/);

    assert.equal((await api.call("DELETE", `/volumes/${volume.volumeID}`)).statusCode, 204);
    assert.equal((await api.call("DELETE", `/volumes/${volume.volumeID}`)).statusCode, 404);
    assert.equal((await api.call("GET", `/volumes/${volume.volumeID}`)).statusCode, 404);
    assert.equal((await api.call("GET", "/volumes/not-a-uuid")).statusCode, 404);
  });

  it("refuses names E2B refuses; the admin creates in the team it acts as", async () => {
    for (const name of ["", "vol name", "vol.name", "vol/a", "{x}", 5]) {
      const res = await api.call("POST", "/volumes", { body: { name } });
      assert.equal(res.statusCode, 400, JSON.stringify(name));
    }
    const admin = await api.call("POST", "/volumes", {
      apiKey: null,
      headers: { "x-admin-token": TEST_ADMIN_TOKEN },
      body: { name: "admins" },
    });
    assert.equal(admin.statusCode, 201);
    const listed = (await api.call("GET", "/volumes")).json() as { name: string }[];
    assert.ok(
      listed.some((v) => v.name === "admins"),
      "the default team's",
    );
  });

  it("serves a volume's files to its token only", async () => {
    const volume = (await api.call("POST", "/volumes", { body: { name: "files" } })).json() as {
      volumeID: string;
      token: string;
    };
    const other = (await api.call("POST", "/volumes", { body: { name: "other" } })).json() as {
      volumeID: string;
      token: string;
    };

    const made = await content("POST", volume, "dir", { path: "/a/b", force: "true", mode: "493" });
    assert.equal(made.statusCode, 201);
    assert.equal((made.json() as { type: string }).type, "directory");
    const written = await content("PUT", volume, "file", { path: "/a/b/f.txt" }, { body: "hi" });
    assert.equal(written.statusCode, 201, written.body);
    assert.deepEqual(
      (({ name, path, type, size, mode }) => ({ name, path, type, size, mode }))(
        written.json() as Record<string, unknown>,
      ),
      { name: "f.txt", path: "/a/b/f.txt", type: "file", size: 2, mode: 0o644 },
    );
    const read = await content("GET", volume, "file", { path: "/a/b/f.txt" });
    assert.equal(read.body, "hi");
    assert.equal(read.headers["content-type"], "application/octet-stream");
    const listed = await content("GET", volume, "dir", { path: "/a", depth: "2" });
    assert.deepEqual(
      (listed.json() as { path: string }[]).map((e) => e.path),
      ["/a/b", "/a/b/f.txt"],
    );
    const patched = await content(
      "PATCH",
      volume,
      "path",
      { path: "/a/b/f.txt" },
      {
        body: { mode: 0o600 },
      },
    );
    assert.equal((patched.json() as { mode: number }).mode, 0o600);
    assert.equal((await content("DELETE", volume, "path", { path: "/a" })).statusCode, 204);
    const gone = await content("GET", volume, "path", { path: "/a" });
    assert.equal(gone.statusCode, 404);
    assert.match(errorOf(gone).message, /path '\/a' not found/);

    // Tokens: none, another volume's, or an API key do not open it.
    for (const token of ["", other.token, API_KEY]) {
      const res = await content("GET", volume, "dir", { path: "/" }, { token });
      assert.equal(res.statusCode, 401, `token ${JSON.stringify(token.slice(0, 8))}`);
    }
    const climb = await content("GET", volume, "file", { path: "../other" });
    assert.equal(climb.statusCode, 400);
    const noPath = await content("GET", volume, "file", {});
    assert.equal(errorOf(noPath).message, "querystring/path is required");
  });

  it("answers every content route as E2B's Python SDK reads it (a stdlib client of its wire)", async (t) => {
    if (!existsSync(PYTHON)) {
      t.skip(`${PYTHON} is not installed: the Python SDK's wire is not checked`);
      return;
    }
    const volume = (await api.call("POST", "/volumes", { body: { name: "python" } })).json() as {
      volumeID: string;
      token: string;
    };
    // Its own listener on the app the other tests inject into (closed after, the app not).
    await api.app.ready();
    const server = api.app.server;
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise((resolve) => server.close(resolve)));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const check = new URL("../../helpers/python_volume_check.py", import.meta.url).pathname;
    const run = await promisify(execFile)(PYTHON, [check, url, volume.volumeID, volume.token], {
      timeout: 60_000,
    }).catch((err: { stdout?: string; stderr?: string }) =>
      assert.fail(`${err.stdout}${err.stderr}`),
    );
    assert.match(run.stdout, /ok write_file 201/);
    assert.match(run.stdout, /ok get_info missing 404/);
  });

  it("mounts the team's volumes by name at create, and no other's", async () => {
    const created = await api.call("POST", "/volumes", { body: { name: "mounted" } });
    const volume = created.json() as { volumeID: string };
    const ofB = (
      await api.call("POST", "/volumes", { apiKey: keyB, body: { name: "b-only" } })
    ).json() as {
      volumeID: string;
    };
    const res = await api.call("POST", "/v2/sandboxes", {
      body: { templateID: "base", volumeMounts: [{ name: "mounted", path: "/mnt/data/" }] },
    });
    assert.equal(res.statusCode, 201, res.body);
    const input = api.service.callsOf("create").at(-1)?.[0] as { volumeMounts: unknown };
    assert.deepEqual(input.volumeMounts, [
      { volumeId: volume.volumeID, name: "mounted", path: "/mnt/data" },
    ]);
    const sandboxId = (res.json() as { sandboxID: string }).sandboxID;
    const detail = await api.call("GET", `/sandboxes/${sandboxId}`);
    assert.deepEqual((detail.json() as { volumeMounts: unknown }).volumeMounts, [
      { name: "mounted", path: "/mnt/data" },
    ]);

    const refused: [object, number, RegExp][] = [
      [{ name: "b-only", path: "/mnt/x" }, 404, /volume "b-only" not found/],
      [{ name: "nope", path: "/mnt/x" }, 404, /not found/],
      [
        { name: "mounted", path: "relative" },
        400,
        /volumeMounts\/0\/path must be an absolute path/,
      ],
      [{ name: "mounted", path: "/etc" }, 400, /cannot be \/etc/],
      [{ name: "mounted", path: "/proc/x" }, 400, /cannot be \/proc\/x/],
      [{ path: "/mnt/x" }, 400, /name must be a volume's name/],
    ];
    for (const [mount, status, message] of refused) {
      const bad = await api.call("POST", "/v2/sandboxes", { body: { volumeMounts: [mount] } });
      assert.equal(bad.statusCode, status, JSON.stringify(mount));
      assert.match(errorOf(bad).message, message);
    }
    const twice = await api.call("POST", "/v2/sandboxes", {
      body: {
        volumeMounts: [
          { name: "mounted", path: "/mnt/a" },
          { name: "mounted", path: "/mnt/a/" },
        ],
      },
    });
    assert.match(errorOf(twice).message, /two volumes at one path/);

    // A mounted volume stays until its sandboxes are gone.
    mountedBy.set(volume.volumeID, [sandboxId]);
    const busy = await api.call("DELETE", `/volumes/${volume.volumeID}`);
    assert.equal(busy.statusCode, 409);
    assert.match(
      errorOf(busy).message,
      new RegExp(`mounted by sandbox ${sandboxId}: kill it first`),
    );
    mountedBy.delete(volume.volumeID);
    assert.equal((await api.call("DELETE", `/volumes/${volume.volumeID}`)).statusCode, 204);
    assert.equal(
      (await api.call("DELETE", `/volumes/${ofB.volumeID}`, { apiKey: keyB })).statusCode,
      204,
    );
  });
});

describe("volume tokens", () => {
  const dir = mkdtempSync(join(tmpdir(), "warren-volume-tokens-"));
  let catalog: SqliteCatalog;
  let api: Harness;
  let now = Date.parse("2030-01-01T00:00:00Z");
  const HOUR = 3_600_000;

  before(async () => {
    catalog = await SqliteCatalog.open(join(dir, "catalog.sqlite"));
    const volumes = new Volumes({
      catalog: catalog.volumes,
      dir: join(dir, "volumes"),
      tokenTtlMs: 24 * HOUR,
      now: () => now,
    });
    api = useApi({
      authenticate: testAuth(() => new Set([API_KEY]), catalog.teams),
      volumes: () => volumes,
    });
  });

  after(async () => {
    await catalog.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const list = (volumeID: string, token: string) =>
    api.app.inject({
      method: "GET",
      url: `/volumecontent/${volumeID}/dir?path=/`,
      headers: { authorization: `Bearer ${token}` },
    });

  it("expire, are fresh at each GET, and a rotation ends every one handed out before it", async () => {
    const created = (await api.call("POST", "/volumes", { body: { name: "t" } })).json() as {
      volumeID: string;
      token: string;
    };
    const { volumeID } = created;
    now += HOUR;
    const fetched = (await api.call("GET", `/volumes/${volumeID}`)).json() as { token: string };
    assert.notEqual(fetched.token, created.token, "each GET hands out a token of its own");
    assert.equal((await list(volumeID, created.token)).statusCode, 200);

    // A day after it was handed out, a token opens nothing; a fresh one does.
    now += 23 * HOUR;
    const expired = await list(volumeID, created.token);
    assert.equal(expired.statusCode, 401);
    assert.match(errorOf(expired).message, /expired: get a fresh one from GET \/volumes\/\{id\}/);
    assert.equal((await list(volumeID, fetched.token)).statusCode, 200);

    // A rotation (a token leaked): every token handed out before it stops at once.
    const rotated = await api.call("POST", `/volumes/${volumeID}/rotate-token`);
    assert.equal(rotated.statusCode, 200, rotated.body);
    const { token } = rotated.json() as { token: string };
    assert.equal((await list(volumeID, fetched.token)).statusCode, 401);
    assert.equal((await list(volumeID, token)).statusCode, 200);
    // Another team's key reads the volume as unknown, as on every volume route.
    const stranger = await api.call("POST", `/volumes/${volumeID}/rotate-token`, {
      apiKey: "e2b_not_a_key",
    });
    assert.equal(stranger.statusCode, 401);
  });
});
