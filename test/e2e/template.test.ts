// The base template is rebuilt when a boot now would differ from the one it was captured
// from: here, the guest kernel command line, through the guest ASLR setting. Each template
// guest keeps the randomization it booted with.
import assert from "node:assert/strict";
import { after, it } from "node:test";
import { Sandbox } from "e2b";
import { leakCheck } from "../helpers/leak-check.js";
import { startServer, type TestServer } from "../helpers/server.js";

let server: TestServer | undefined;

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
  assert.deepEqual(await leakCheck(), []);
});

/** Starts a server with `env` and reads the guest's randomize_va_space from a new sandbox. */
async function guestRandomization(env: Record<string, string>): Promise<string> {
  server = await startServer(env);
  const sandbox = await Sandbox.create();
  try {
    return (await sandbox.commands.run("cat /proc/sys/kernel/randomize_va_space")).stdout.trim();
  } finally {
    await sandbox.kill();
    assert.equal(await server.stop(), 0);
  }
}

it("rebuilds the template when the guest's kernel command line changes", async () => {
  assert.equal(await guestRandomization({ WARREN_GUEST_ASLR: "on" }), "2");
  const first = server?.logs.find((l) => l.msg === "template.stale");
  // Stale only if the template was last built with another setting (e.g. by another test).
  if (first) assert.match(String(first.reason), /kernel command line/);

  assert.equal(await guestRandomization({ WARREN_GUEST_ASLR: "off" }), "0");
  const stale = server?.logs.find((l) => l.msg === "template.stale");
  assert.ok(stale, "turning ASLR off rebuilt the template");
  assert.match(String(stale.reason), /norandmaps/);

  // Unchanged settings reuse it.
  server = await startServer({ WARREN_GUEST_ASLR: "off" });
  assert.equal(
    server.logs.find((l) => l.msg === "template.building"),
    undefined,
  );
});
