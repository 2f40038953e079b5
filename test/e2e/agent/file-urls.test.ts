// envd with an access token: signed /files URLs (Sandbox.uploadUrl/downloadUrl used with plain
// fetch), token checks on the SDK's RPC and REST calls, and the token-free /health.
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { rm, stat } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { AuthenticationError, Sandbox } from "e2b";
import { ENVD_VERSION } from "../../../src/protocol/index.js";
import { type RunningEnvd, startEnvd, testUserIds, userWorkdir } from "../../helpers/envd.js";

const TOKEN = `token-${randomUUID()}`;

const { uid } = testUserIds();
let env: RunningEnvd;
/** Knows the token: RPC/REST calls carry X-Access-Token and URLs get signatures. */
let sbx: Sandbox;
/** Plain debug-mode Sandbox.create(): no token. */
let anon: Sandbox;

before(async () => {
  env = await startEnvd();
  const res = await env.init({ accessToken: TOKEN });
  assert.equal(res.status, 204);
  // In debug mode Sandbox.create()/connect() never call the API, so they cannot learn (or be
  // given) an envdAccessToken: they build `new Sandbox({sandboxId, envdVersion, ...config})`
  // and the ConnectionConfig carries no token. The constructor is public in the typings, so we
  // build the instance the way create() does for a secured sandbox.
  sbx = new Sandbox({
    sandboxId: "debug_sandbox_id",
    envdVersion: ENVD_VERSION,
    envdAccessToken: TOKEN,
    debug: true,
  });
  anon = await Sandbox.create();
});

after(async () => {
  await env?.stop();
});

function form(part: string | Blob, filename?: string): FormData {
  const body = new FormData();
  if (typeof part === "string") body.append("file", part);
  else body.append("file", part, filename ?? "upload.bin");
  return body;
}

async function json(res: Response): Promise<unknown> {
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Replaces the last character of the URL's signature. */
function tamper(url: string): string {
  const u = new URL(url);
  const sig = u.searchParams.get("signature") ?? "";
  u.searchParams.set("signature", sig.slice(0, -1) + (sig.endsWith("A") ? "B" : "A"));
  return u.toString();
}

describe("file URLs with signatures", () => {
  it("the tokened SDK sandbox reads, writes and runs commands", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "hello");
    assert.equal(await sbx.files.read(`${dir}/a.txt`), "hello");
    assert.equal((await sbx.commands.run("echo hi")).stdout, "hi\n");
  });

  it("upload URL accepts a text FormData part (no filename), as E2B's signing test sends", async (t) => {
    const dir = await userWorkdir(t);
    const path = `${dir}/hello.txt`;
    const res = await fetch(await sbx.uploadUrl(path), {
      method: "POST",
      body: form("file content"),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await json(res), [{ name: "hello.txt", path, type: "file" }]);
    const down = await fetch(await sbx.downloadUrl(path));
    assert.equal(down.status, 200);
    assert.equal(await down.text(), "file content");
  });

  it("signed upload and download URLs round-trip bytes, with and without expiration", async (t) => {
    const dir = await userWorkdir(t);
    for (const opts of [{}, { useSignatureExpiration: 120 }]) {
      const path = `${dir}/bytes-${"useSignatureExpiration" in opts ? "exp" : "plain"}.bin`;
      const data = randomBytes(64 * 1024);
      const upUrl = await sbx.uploadUrl(path, opts);
      assert.equal(
        new URL(upUrl).searchParams.has("signature_expiration"),
        "useSignatureExpiration" in opts,
      );
      const res = await fetch(upUrl, { method: "POST", body: form(new Blob([data])) });
      assert.equal(res.status, 200);
      assert.deepEqual(await json(res), [{ name: path.split("/").pop(), path, type: "file" }]);
      assert.equal((await stat(path)).uid, uid, "uploaded file is owned by the user");
      const down = await fetch(await sbx.downloadUrl(path, opts));
      assert.equal(down.status, 200);
      assert.ok(Buffer.from(await down.arrayBuffer()).equals(data), "downloaded bytes differ");
    }
  });

  it("signed URLs for root resolve relative paths in /root and write as root", async (t) => {
    const name = `t-${randomUUID().slice(0, 8)}.txt`;
    t.after(() => rm(`/root/${name}`, { force: true }));
    const opts = { user: "root", useSignatureExpiration: 120 } as const;
    const res = await fetch(await sbx.uploadUrl(name, opts), {
      method: "POST",
      body: form(new Blob(["root content"])),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await json(res), [{ name, path: `/root/${name}`, type: "file" }]);
    assert.equal((await stat(`/root/${name}`)).uid, 0);
    const down = await fetch(await sbx.downloadUrl(name, opts));
    assert.equal(down.status, 200);
    assert.equal(await down.text(), "root content");
  });

  it("an expired signature is rejected with 401 on GET and POST", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/hello.txt`, "hello world");
    const expired = { code: 401, message: "signature is already expired" };
    const get = await fetch(
      await sbx.downloadUrl(`${dir}/hello.txt`, { useSignatureExpiration: -10_000 }),
    );
    assert.equal(get.status, 401);
    assert.deepEqual(await json(get), expired);
    const post = await fetch(
      await sbx.uploadUrl(`${dir}/up.txt`, { useSignatureExpiration: -100_000 }),
      {
        method: "POST",
        body: form(new Blob(["x"])),
      },
    );
    assert.equal(post.status, 401);
    assert.deepEqual(await json(post), expired);
    await assert.rejects(stat(`${dir}/up.txt`), "nothing was written");
  });

  it("a tampered or misused signature is rejected with 401", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "a");
    await sbx.files.write(`${dir}/b.txt`, "b");
    const invalid = { code: 401, message: "invalid signature" };
    const tampered = await fetch(tamper(await sbx.downloadUrl(`${dir}/a.txt`)));
    assert.equal(tampered.status, 401);
    assert.deepEqual(await json(tampered), invalid);
    // A signature for a.txt used for b.txt.
    const other = new URL(await sbx.downloadUrl(`${dir}/a.txt`));
    other.searchParams.set("path", `${dir}/b.txt`);
    const wrongPath = await fetch(other);
    assert.equal(wrongPath.status, 401);
    assert.deepEqual(await json(wrongPath), invalid);
    // A read signature used for a write.
    const readUrl = await sbx.downloadUrl(`${dir}/c.txt`);
    const wrongOp = await fetch(readUrl, { method: "POST", body: form(new Blob(["c"])) });
    assert.equal(wrongOp.status, 401);
    assert.deepEqual(await json(wrongOp), invalid);
    await assert.rejects(stat(`${dir}/c.txt`), "nothing was written");
  });

  it("/files without token or signature is 401", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "a");
    const url = `${env.url}/files?path=${encodeURIComponent(`${dir}/a.txt`)}`;
    const get = await fetch(url);
    assert.equal(get.status, 401);
    assert.equal(((await json(get)) as { code?: number }).code, 401);
    const post = await fetch(url, { method: "POST", body: form(new Blob(["x"])) });
    assert.equal(post.status, 401);
    assert.equal(((await json(post)) as { code?: number }).code, 401);
    assert.equal(await sbx.files.read(`${dir}/a.txt`), "a", "the file was not overwritten");
  });

  it("/files without token or signature says 'missing signature query parameter' (as envd)", async (t) => {
    const dir = await userWorkdir(t);
    const res = await fetch(`${env.url}/files?path=${encodeURIComponent(`${dir}/a.txt`)}`);
    assert.deepEqual(await json(res), { code: 401, message: "missing signature query parameter" });
  });

  it("/files accepts the X-Access-Token header instead of a signature", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "via header");
    const res = await fetch(`${env.url}/files?path=${encodeURIComponent(`${dir}/a.txt`)}`, {
      headers: { "X-Access-Token": TOKEN },
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "via header");
  });

  it("a wrong X-Access-Token header is rejected even with a valid signature", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "secret");
    const res = await fetch(await sbx.downloadUrl(`${dir}/a.txt`), {
      headers: { "X-Access-Token": "wrong" },
    });
    assert.equal(res.status, 401);
    assert.deepEqual(await json(res), {
      code: 401,
      message: "access token present in header but does not match",
    });
  });
});

describe("token checks", () => {
  it("an SDK sandbox without the token gets AuthenticationError", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/a.txt`, "a");
    await assert.rejects(anon.files.read(`${dir}/a.txt`), AuthenticationError);
    await assert.rejects(anon.files.write(`${dir}/b.txt`, "b"), AuthenticationError);
    await assert.rejects(anon.files.list(dir), AuthenticationError);
    await assert.rejects(anon.commands.run("echo hi"), AuthenticationError);
    assert.equal(await sbx.files.exists(`${dir}/b.txt`), false);
  });

  it("an SDK sandbox with a wrong token gets AuthenticationError", async () => {
    const wrong = new Sandbox({
      sandboxId: "debug_sandbox_id",
      envdVersion: ENVD_VERSION,
      envdAccessToken: "not-the-token",
      debug: true,
    });
    await assert.rejects(wrong.files.getInfo("/home/user"), AuthenticationError);
    await assert.rejects(wrong.commands.run("echo hi"), AuthenticationError);
  });

  it("/health works without the token", async () => {
    const res = await fetch(`${env.url}/health`);
    assert.equal(res.status, 204);
  });

  it("/envs needs the token", async () => {
    const without = await fetch(`${env.url}/envs`);
    assert.equal(without.status, 401);
    assert.equal(((await json(without)) as { code?: number }).code, 401);
    const withToken = await fetch(`${env.url}/envs`, { headers: { "X-Access-Token": TOKEN } });
    assert.equal(withToken.status, 200);
    const body = await json(withToken);
    assert.ok(typeof body === "object" && body !== null && !Array.isArray(body), "a JSON object");
    for (const value of Object.values(body)) assert.equal(typeof value, "string");
  });

  it("/metrics needs the token and reports positive totals", async () => {
    const without = await fetch(`${env.url}/metrics`);
    assert.equal(without.status, 401);
    await without.body?.cancel();
    const res = await fetch(`${env.url}/metrics`, { headers: { "X-Access-Token": TOKEN } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const body = (await res.json()) as Record<string, unknown>;
    for (const key of ["cpu_count", "mem_total", "disk_total"]) {
      assert.equal(typeof body[key], "number", key);
      assert.ok((body[key] as number) > 0, `${key} > 0`);
    }
  });
});
