// Two teams on one node through the real e2b SDK: a second team made with the admin token
// cannot see, reach, kill or fork the first team's sandbox (the SDK gets NotFound), lists
// only its own, and is held to its quota (429 quota_exceeded); a removed key is refused at
// once. The admin token is the server's own file, 0600.
import assert from "node:assert/strict";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { it } from "node:test";
import { NotFoundError, Sandbox } from "e2b";
import { api, useServer } from "../helpers/server.js";

const server = useServer();

async function adminToken(): Promise<string> {
  const file = join(server.dataDir, "secrets", "admin-token");
  assert.equal((await stat(file)).mode & 0o777, 0o600);
  return (await readFile(file, "utf8")).trim();
}

it("team B reaches nothing of team A's, and is held to its own quota", async () => {
  const admin = { "x-admin-token": await adminToken(), "x-api-key": "" };
  const made = await api(
    server,
    "POST",
    "/admin/teams",
    { name: "b", limits: { maxSandboxes: 1 } },
    admin,
  );
  assert.equal(made.status, 201);
  const { apiKey: keyB } = made.body as { apiKey: string };

  const a = await Sandbox.create(); // the default team's key (E2B_API_KEY)
  try {
    const b = await Sandbox.create({ apiKey: keyB });
    try {
      await assert.rejects(Sandbox.connect(a.sandboxId, { apiKey: keyB }), NotFoundError);
      await assert.rejects(Sandbox.getInfo(a.sandboxId, { apiKey: keyB }), NotFoundError);
      assert.equal(await Sandbox.kill(a.sandboxId, { apiKey: keyB }), false);
      const forked = await api(
        server,
        "POST",
        `/sandboxes/${a.sandboxId}/fork`,
        { count: 1 },
        {
          "x-api-key": keyB,
        },
      );
      assert.equal(forked.status, 404);
      const listed = await Sandbox.list({ apiKey: keyB }).nextItems();
      assert.deepEqual(
        listed.map((s) => s.sandboxId),
        [b.sandboxId],
      );
      // Still running, and its own team still reaches it.
      assert.equal((await a.commands.run("echo alive")).stdout.trim(), "alive");

      // At its quota of one running sandbox.
      const over = await api(
        server,
        "POST",
        "/sandboxes",
        { templateID: "base" },
        {
          "x-api-key": keyB,
        },
      );
      assert.equal(over.status, 429);
      assert.equal((over.body as { reason: string }).reason, "quota_exceeded");

      // Node-wide views are the admin's.
      const node = await api(server, "GET", "/node", undefined, { "x-api-key": keyB });
      assert.equal(node.status, 403);
    } finally {
      await Sandbox.kill(b.sandboxId, { apiKey: keyB });
    }
    // Its key removed: refused from the next request on.
    const keys = await api(server, "GET", "/api-keys", undefined, { "x-api-key": keyB });
    const [first] = keys.body as { id: string }[];
    assert.ok(first);
    const removed = await api(server, "DELETE", `/api-keys/${first.id}`, undefined, {
      "x-api-key": keyB,
    });
    assert.equal(removed.status, 204);
    const after = await api(server, "GET", "/v2/sandboxes", undefined, { "x-api-key": keyB });
    assert.equal(after.status, 401);
  } finally {
    await Sandbox.kill(a.sandboxId);
  }
});
