// The `warren` command's teams, keys and credentials, run as a user runs it (the bundle
// `npm run build` makes) against a fake of the teams API (test/fakes/fake-teams-api.ts):
// the arguments it takes, what it prints, which credential it sends where, and its one-line
// errors with their exit codes.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import { FakeTeamsApi } from "../../fakes/fake-teams-api.js";

const CLI = join(import.meta.dirname, "..", "..", "..", "dist", "cli", "warren.mjs");

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

describe("warren team, warren key and the credentials they use", () => {
  let fake: FakeTeamsApi;
  /** A data dir of the test's own, so the host's /var/lib/warren is never read. */
  let home: string;

  before(async () => {
    home = await mkdtemp(join(tmpdir(), "warren-cli-teams-"));
    await mkdir(join(home, "secrets"));
  });
  after(async () => {
    await fake?.stop();
    await rm(home, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await fake?.stop();
    fake = await new FakeTeamsApi().start();
    await rm(join(home, "secrets", "admin-token"), { force: true });
    await rm(join(home, "secrets", "api-key"), { force: true });
  });

  /** The CLI with only the environment given (none of the caller's WARREN_* or E2B_*). */
  function warren(args: string[], env: Record<string, string> = {}): Promise<Run> {
    const inherited = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !/^(WARREN_|E2B_)/.test(k)),
    );
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...inherited, WARREN_URL: fake.url, WARREN_HOME: home, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    return new Promise((resolve, reject) => {
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  }
  const asAdmin = () => ({ WARREN_ADMIN_TOKEN: fake.adminToken });
  async function ok(args: string[], env: Record<string, string> = asAdmin()): Promise<string> {
    const run = await warren(args, env);
    assert.equal(run.code, 0, `warren ${args.join(" ")}: ${run.stderr}`);
    return run.stdout;
  }
  /** Fails with one `warren: …` line on stderr and this exit code; that line. */
  async function fails(args: string[], env: Record<string, string>, code: number) {
    const run = await warren(args, env);
    assert.equal(run.code, code, `warren ${args.join(" ")}: ${run.stdout}${run.stderr}`);
    const lines = run.stderr.split("\n").filter(Boolean);
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0] as string, /^warren: /);
    return lines[0] as string;
  }
  const lastRequest = (method: string, path: string) => {
    const found = fake.requests.filter((r) => r.method === method && r.path === path).at(-1);
    assert.ok(found, `no ${method} ${path} reached the server`);
    return found;
  };

  it("team create: quotas from the flags, the admin token sent; --json prints only {teamID, apiKey}", async () => {
    const out = await ok([
      "team",
      "create",
      "research",
      "--max-sandboxes",
      "10",
      "--max-vcpus",
      "20",
      "--max-memory-mib",
      "4096",
      "--max-disk-gib",
      "50",
      "--max-builds",
      "2",
      "--max-upload-mib",
      "256",
      "--json",
    ]);
    const printed = JSON.parse(out) as Record<string, unknown>;
    assert.deepEqual(Object.keys(printed).sort(), ["apiKey", "teamID"]);
    const team = fake.teams.get(printed.teamID as string);
    assert.equal(team?.name, "research");
    assert.deepEqual(team?.limits, {
      maxSandboxes: 10,
      maxVcpus: 20,
      maxMemoryMiB: 4096,
      maxDiskGiB: 50,
      maxBuilds: 2,
      maxUploadBytes: 256 * 1024 * 1024,
    });
    assert.ok([...fake.keys.values()].some((k) => k.key === printed.apiKey));
    const sent = lastRequest("POST", "/admin/teams");
    assert.equal(sent.headers["x-admin-token"], fake.adminToken);
    assert.equal(sent.headers["x-api-key"], undefined);
    assert.deepEqual(sent.body, {
      name: "research",
      limits: team?.limits,
    });
  });

  it("team create without --json: the team, its key and that the key is shown once; no flag is no limit", async () => {
    const out = await ok(["team", "create", "plain"]);
    const team = [...fake.teams.values()].find((t) => t.name === "plain");
    assert.ok(team);
    assert.deepEqual(team.limits, {}, "no limits named: none sent");
    const key = [...fake.keys.values()].find((k) => k.teamID === team.teamID);
    assert.ok(key && out.includes(team.teamID) && out.includes(key.key), out);
    assert.match(out, /shown this once/);
  });

  it("team create refuses a quota that is not a whole number, before asking the server (exit 2)", async () => {
    for (const bad of ["-1", "1.5", "lots", ""]) {
      const line = await fails(["team", "create", "x", "--max-vcpus", bad], asAdmin(), 2);
      assert.match(line, /--max-vcpus .* is not a whole number/);
    }
    assert.equal(fake.requests.length, 0);
  });

  it("team ls: each team's quotas and usage as used/limit, - where there is no limit; --json as the server says", async () => {
    const team = fake.addTeam("busy", {
      maxSandboxes: 5,
      maxMemoryMiB: 4096,
      maxDiskGiB: 20,
      maxVolumeBytes: 512 * 1024 * 1024,
    });
    fake.addSandbox(team.teamID, { cpuCount: 2, memoryMB: 1024, diskSizeMB: 1536 });
    fake.addSandbox(team.teamID, { cpuCount: 1, memoryMB: 512, diskSizeMB: 512, state: "paused" });
    const table = await ok(["team", "ls"]);
    const [header, ...rows] = table.trimEnd().split("\n");
    assert.match(
      header as string,
      /^ID\s+NAME\s+SANDBOXES\s+VCPUS\s+MEMORY\s+DISK\s+BUILDS\s+UPLOADS\s+VOLUMES\s+AGE$/,
    );
    const row = rows.find((r) => r.startsWith(team.teamID));
    assert.match(
      row ?? "",
      /busy\s+2\/5\s+3\/-\s+1536Mi\/4096Mi\s+2Gi\/20Gi\s+-\s+-\s+512Mi\s+\d+s$/,
    );
    assert.ok(
      rows.some((r) => /^default\s+default\s+0\/-\s+0\/-\s+0Mi\/-\s+0Gi\/-/.test(r)),
      table,
    );
    const listed = JSON.parse(await ok(["team", "ls", "--json"])) as { teamID: string }[];
    assert.deepEqual(listed.map((t) => t.teamID).sort(), [...fake.teams.keys()].sort());
  });

  it("team rm: refused while the team has sandboxes, saying how to force; --force removes it with its keys", async () => {
    const team = fake.addTeam("leaving");
    fake.addKey(team.teamID, "k");
    fake.addSandbox(team.teamID);
    const line = await fails(["team", "rm", team.teamID], asAdmin(), 1);
    assert.match(line, /has 1 running or paused sandboxes/, "the server's message");
    assert.ok(line.includes(`warren team rm ${team.teamID} --force`), line);
    assert.ok(fake.teams.has(team.teamID));
    await ok(["team", "rm", team.teamID, "--force"]);
    assert.equal(fake.teams.has(team.teamID), false);
    assert.equal([...fake.keys.values()].filter((k) => k.teamID === team.teamID).length, 0);
    assert.match(await fails(["team", "rm", "default"], asAdmin(), 1), /default team stays/);
    assert.match(await fails(["team", "rm", "nosuch"], asAdmin(), 1), /team nosuch not found/);
  });

  it("team commands need the admin token: an API key alone is a usage error (exit 2) and nothing is sent", async () => {
    const line = await fails(["team", "ls"], { WARREN_API_KEY: fake.defaultKey }, 2);
    assert.match(line, /no admin token/);
    assert.match(line, /--admin-token/);
    assert.ok(line.includes(join(home, "secrets", "admin-token")), line);
    assert.equal(fake.requests.length, 0);
  });

  it("a wrong admin token: the server's refusal in one line, naming where the token came from (exit 1)", async () => {
    const line = await fails(["team", "ls", "--admin-token", "wrong"], {}, 1);
    assert.match(line, /401 invalid admin token \(the admin token from --admin-token\)/);
  });

  it("key create|ls|rm with a team key: that team's own keys through /api-keys", async () => {
    const team = fake.addTeam("own");
    const mine = fake.addKey(team.teamID, "mine");
    const env = { WARREN_API_KEY: mine.key };
    const created = JSON.parse(await ok(["key", "create", "--name", "ci", "--json"], env)) as {
      id: string;
      key: string;
      name: string;
    };
    assert.equal(created.name, "ci");
    assert.equal(fake.keys.get(created.id)?.teamID, team.teamID);
    assert.equal(lastRequest("POST", "/api-keys").headers["x-api-key"], mine.key);

    const table = await ok(["key", "ls"], env);
    assert.match(table, /^ID\s+NAME\s+KEY\s+CREATED\s+LAST USED/);
    assert.match(table, new RegExp(`${created.id}\\s+ci\\s+e2b_\\w+…\\w{4}\\s+\\d+s ago\\s+never`));
    assert.ok(!table.includes(created.key) && !table.includes(mine.key), "keys only masked");
    assert.doesNotMatch(table, new RegExp(fake.defaultKey.slice(4, 12)), "no other team's keys");

    await ok(["key", "rm", created.id], env);
    assert.equal(fake.keys.has(created.id), false);
    assert.equal(lastRequest("DELETE", `/api-keys/${created.id}`).headers["x-api-key"], mine.key);
    // The removed key is refused from the next request on.
    assert.match(
      await fails(["key", "ls"], { WARREN_API_KEY: created.key }, 1),
      /401 invalid API key \(the API key from WARREN_API_KEY\)/,
    );
    assert.match(await fails(["key", "rm", "key_nosuch"], env, 1), /key key_nosuch: .*not found/);
  });

  it("key create without --json prints the key once with that warning; default name user@host", async () => {
    const out = await ok(["key", "create"], { WARREN_API_KEY: fake.defaultKey });
    const created = [...fake.keys.values()].at(-1);
    assert.ok(created && out.includes(created.key) && out.includes(created.id), out);
    assert.match(created.name, /.+@.+/);
    assert.match(out, /shown this once/);
  });

  it("key --team: the admin's routes for another team (create, rm) and X-Team-ID to list", async () => {
    const team = fake.addTeam("other");
    const created = JSON.parse(
      await ok(["key", "create", "--team", team.teamID, "--name", "ops", "--json"]),
    ) as { id: string };
    assert.equal(fake.keys.get(created.id)?.teamID, team.teamID);
    const post = lastRequest("POST", `/admin/teams/${team.teamID}/api-keys`);
    assert.equal(post.headers["x-admin-token"], fake.adminToken);

    const listed = JSON.parse(await ok(["key", "ls", "--team", team.teamID, "--json"])) as {
      id: string;
    }[];
    assert.deepEqual(
      listed.map((k) => k.id),
      [created.id],
    );
    const get = lastRequest("GET", "/api-keys");
    assert.equal(get.headers["x-team-id"], team.teamID);
    assert.equal(get.headers["x-admin-token"], fake.adminToken);
    assert.equal(get.headers["x-api-key"], undefined);

    await ok(["key", "rm", created.id, "--team", team.teamID]);
    assert.equal(fake.keys.has(created.id), false);
    lastRequest("DELETE", `/admin/teams/${team.teamID}/api-keys/${created.id}`);
  });

  it("key commands with the admin token and no --team say to name the team (exit 2)", async () => {
    for (const args of [
      ["key", "ls"],
      ["key", "create"],
      ["key", "rm", "x"],
    ]) {
      const line = await fails(args, asAdmin(), 2);
      assert.match(line, /name the team: --team ID/);
    }
    assert.equal(fake.requests.length, 0);
    assert.match(
      await fails(["key", "ls", "--team", "x"], { WARREN_API_KEY: fake.defaultKey }, 2),
      /no admin token/,
    );
  });

  it("on the node: the local admin token is preferred (every team's sandboxes, the SDK too), else the key file", async () => {
    const a = fake.addTeam("a");
    const b = fake.addTeam("b");
    const sa = fake.addSandbox(a.teamID);
    const sb = fake.addSandbox(b.teamID);
    await writeFile(join(home, "secrets", "api-key"), `${fake.defaultKey}\n`, { mode: 0o600 });
    await writeFile(join(home, "secrets", "admin-token"), `${fake.adminToken}\n`, { mode: 0o600 });

    const all = JSON.parse(await ok(["sandbox", "ls", "--json"], {})) as { sandboxId: string }[];
    assert.deepEqual(all.map((s) => s.sandboxId).sort(), [sa.sandboxID, sb.sandboxID].sort());
    // The SDK's request carries the token as X-Admin-Token and no X-API-Key at all.
    const listed = lastRequest("GET", "/v2/sandboxes");
    assert.equal(listed.headers["x-admin-token"], fake.adminToken);
    assert.equal(listed.headers["x-api-key"], undefined);
    assert.match(await ok(["sandbox", "info", sb.sandboxID, "--json"], {}), /"state": "running"/);
    assert.equal(lastRequest("GET", `/sandboxes/${sb.sandboxID}`).headers["x-api-key"], undefined);

    // A key given by flag or environment wins: that team's view only.
    const aKey = fake.addKey(a.teamID, "a").key;
    const own = JSON.parse(await ok(["sandbox", "ls", "--json", "--api-key", aKey], {})) as {
      sandboxId: string;
    }[];
    assert.deepEqual(
      own.map((s) => s.sandboxId),
      [sa.sandboxID],
    );
    assert.equal(lastRequest("GET", "/v2/sandboxes").headers["x-api-key"], aKey);

    // No admin token on this node (an older install): the key file, as before.
    await rm(join(home, "secrets", "admin-token"));
    await ok(["sandbox", "ls", "--json"], {});
    const old = lastRequest("GET", "/v2/sandboxes");
    assert.equal(old.headers["x-api-key"], fake.defaultKey);
    assert.equal(old.headers["x-admin-token"], undefined);
  });

  it("no credential anywhere: exit 2, naming every place it looked", async () => {
    const line = await fails(["sandbox", "ls"], {}, 2);
    assert.match(line, /--api-key or --admin-token/);
    assert.match(line, /WARREN_API_KEY or WARREN_ADMIN_TOKEN/);
    assert.ok(line.includes(`${join(home, "secrets", "admin-token")}: not found`), line);
    assert.ok(line.includes(`${join(home, "secrets", "api-key")}: not found`), line);
  });

  it("top: the node's totals with the admin token; with a team key, a note that they need it", async () => {
    const team = fake.addTeam("t");
    const sandbox = fake.addSandbox(team.teamID);
    const admin = await ok(["top", "--once"]);
    assert.match(admin, /node {2}sandboxes 1\/64 {2}vCPUs 2\/32/);
    assert.match(admin, new RegExp(`${sandbox.sandboxID}\\s+base\\s+running`));
    const key = fake.addKey(team.teamID, "t").key;
    const scoped = await ok(["top", "--once"], { WARREN_API_KEY: key });
    assert.match(scoped, /node {2}\(the node's totals need the admin token/);
    assert.match(scoped, new RegExp(`${sandbox.sandboxID}\\s+base\\s+running`));
  });

  it("shell completion knows the team and key commands and their options", async () => {
    const script = await ok(["completion", "bash"], {});
    const top = /^ {4}""\) words="([^"]*)"/m.exec(script)?.[1]?.split(" ") ?? [];
    for (const word of ["team", "key", "--admin-token", "--api-key"]) {
      assert.ok(top.includes(word), `${word} at the top: ${top.join(" ")}`);
    }
    assert.match(script, /"team"\) words="create ls rm --help"/);
    assert.match(
      script,
      /"team create"\) words="--max-sandboxes --max-vcpus --max-memory-mib --max-disk-gib --max-builds --max-upload-mib --max-volume-mib --json --help"/,
    );
    assert.match(script, /"key create"\) words="--name --team --json --help"/);
    assert.match(script, /"key ls"\) words="--team --json --help"/);
    assert.match(script, /"key rm"\) words="--team --help"/);
  });
});
