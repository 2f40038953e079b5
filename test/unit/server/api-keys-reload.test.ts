// The API key file edited while the server runs: the API (on the in-memory stand-in service)
// reads its keys from LiveApiKeys, as node-server.ts wires it, and changes apply without a
// restart: a key removed is refused, a key added is accepted.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { createApi } from "../../../src/api/index.js";
import { LiveApiKeys, loadApiKeys } from "../../../src/server/api-keys.js";
import { RecordingLogger } from "../../fakes/fake-node.js";
import { InMemorySandboxService } from "../../fakes/in-memory-sandbox-service.js";
import { testAuth } from "../../helpers/auth.js";

const root = await mkdtemp(join(tmpdir(), "warren-keys-reload-"));
after(() => rm(root, { recursive: true, force: true }));

async function serve(name: string, options: { watch?: boolean; checkIntervalMs?: number } = {}) {
  const secrets = join(root, name);
  const loaded = await loadApiKeys(secrets, ["extra-key"]);
  const logger = new RecordingLogger();
  const keys = new LiveApiKeys(loaded, ["extra-key"], { logger, ...options });
  const service = new InMemorySandboxService();
  const app = createApi({
    service: () => service,
    authenticate: testAuth(() => keys.keys),
  });
  const status = async (key: string) =>
    (await app.inject({ method: "GET", url: "/v2/sandboxes", headers: { "x-api-key": key } }))
      .statusCode;
  /** The status `key` gets once it settles on `expected` (the watch reports a change soon after it). */
  const settlesOn = async (key: string, expected: number) => {
    const deadline = Date.now() + 5_000;
    let got = await status(key);
    while (got !== expected && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      got = await status(key);
    }
    return got;
  };
  after(() => {
    keys.close();
    return app.close();
  });
  return { file: loaded.file, first: loaded.generated as string, logger, status, settlesOn };
}

test("api keys: key file rewritten from key A to key B → A gets 401 and B works, no restart", async () => {
  // The directory watch alone (the on-use stat is a minute away) must apply it.
  const api = await serve("rewrite", { checkIntervalMs: 60_000 });
  const [a, b] = [api.first, "e2b_bbbbbbbbbbbbbbbbbbbb"];
  assert.equal(await api.status(a), 200);
  assert.equal(await api.status(b), 401);
  await writeFile(api.file, `${b}\n`);
  assert.equal(await api.settlesOn(a, 401), 401);
  assert.equal(await api.status(b), 200);
  assert.equal(await api.status("extra-key"), 200, "WARREN_API_KEYS extras stay");
  assert.equal(api.logger.events("api_keys.reloaded").at(-1)?.fields.keys, 1);
});

test("api keys: an editor's replace (new file renamed over the old) is seen without the watch", async () => {
  // No watch and a stat on every request: the on-use check alone must catch the change.
  const api = await serve("replace", { watch: false, checkIntervalMs: 0 });
  const a = api.first;
  await writeFile(`${api.file}.swp`, `# rotated\ne2b_cccccccccccccccc\n${a}\n`, { mode: 0o644 });
  await rename(`${api.file}.swp`, api.file);
  assert.equal(await api.status("e2b_cccccccccccccccc"), 200, "added key granted at once");
  assert.equal(await api.status(a), 200);
  await writeFile(`${api.file}.swp`, "e2b_cccccccccccccccc\n");
  await rename(`${api.file}.swp`, api.file);
  assert.equal(await api.status(a), 401, "removed key revoked at once");
});

test("api keys: an emptied, deleted or unreadable key file keeps the last good keys, with a warning", async () => {
  const api = await serve("broken", { watch: false, checkIntervalMs: 0 });
  const a = api.first;
  await writeFile(api.file, "# nothing here\n\n");
  assert.equal(await api.status(a), 200, "emptied: last good set kept");
  await rm(api.file);
  assert.equal(await api.status(a), 200, "deleted: last good set kept");
  await mkdir(api.file);
  assert.equal(await api.status(a), 200, "unreadable (a directory): last good set kept");
  const warnings = api.logger.events("api_keys.reload_failed");
  assert.ok(warnings.length >= 3, `one warning per broken version, got ${warnings.length}`);
  const before = warnings.length;
  assert.equal(await api.status(a), 200);
  assert.equal(api.logger.events("api_keys.reload_failed").length, before, "not one per request");

  await rm(api.file, { recursive: true });
  await writeFile(api.file, "e2b_dddddddddddddddd\n");
  assert.equal(await api.status(a), 401, "a good file applies again");
  assert.equal(await api.status("e2b_dddddddddddddddd"), 200);
});
