// A paused sandbox survives a server restart (its snapshot and catalog row are on disk) and
// resumes afterwards with its processes and files; a sandbox left running is reported lost.
import assert from "node:assert/strict";
import { after, it } from "node:test";
import { Sandbox } from "e2b";
import { leakCheck, vmLeftovers } from "../helpers/leak-check.js";
import { startServer, type TestServer } from "../helpers/server.js";

let server: TestServer | undefined;

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
  assert.deepEqual(await leakCheck(), []);
});

it("resumes a paused sandbox after a restart, process and files intact", async () => {
  server = await startServer();
  const sandbox = await Sandbox.create({ lifecycle: { onTimeout: "pause" } });
  const sleeper = await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
  await sandbox.commands.run("echo survived > /dev/shm/s");
  await sandbox.pause();
  assert.equal(await server.stop(), 0);
  assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), [], "stopped server leaves no VMM");

  server = await startServer();
  assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
  const resumed = await Sandbox.connect(sandbox.sandboxId);
  const out = await resumed.commands.run(`cat /dev/shm/s; ps -o pid= -p ${sleeper.pid}`);
  assert.equal(out.stdout.replace(/\s+/g, " ").trim(), `survived ${sleeper.pid}`);
  await resumed.kill();
});

it("a sandbox running when the server is killed is reported lost, and cleaned", async () => {
  server ??= await startServer();
  const sandbox = await Sandbox.create();
  server.process.kill("SIGKILL");
  await server.stop();
  // No warm pool: its VMMs, started once the server is ready, would be leftovers to this check.
  server = await startServer({ WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" });
  const lost = server.logs.find(
    (l) => l.msg === "sandbox.lost" && l.sandboxId === sandbox.sandboxId,
  );
  assert.ok(lost, "the restart reported the sandbox lost");
  assert.equal(await Sandbox.kill(sandbox.sandboxId), false, "it is gone");
  const leftovers = await vmLeftovers(`${server.dataDir}/run`);
  assert.deepEqual(leftovers, [], "its VMM was killed and its runtime dir removed");
});
