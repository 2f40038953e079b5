// Fork and persistent snapshots through the real e2b SDK against a real server and VMs.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { Sandbox } from "e2b";
import { SqliteCatalog } from "../../src/catalog/index.js";
import { api, type LogLine, useServer, waitFor } from "../helpers/server.js";

const server = useServer();

/** A process holding a counter in memory only, served on :8080 (/get, /inc). */
const COUNTER = `python3 -c '
import http.server
n = [41]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/inc": n[0] += 1
        body = str(n[0]).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()'`;

async function counter(sandbox: Sandbox, path = "/get"): Promise<string> {
  try {
    return (await sandbox.commands.run(`curl -s localhost:8080${path}`)).stdout;
  } catch (err) {
    const ps = await sandbox.commands.run("ps -eo pid,stat,args; ss -ltn").catch((e) => e);
    throw new Error(`counter ${path} in ${sandbox.sandboxId} failed: ${err}\n${ps.stdout ?? ps}`);
  }
}

async function startCounter(sandbox: Sandbox): Promise<number> {
  // timeoutMs 0: a command's Connect-Timeout-Ms (60 s by default) bounds its lifetime.
  const handle = await sandbox.commands.run(COUNTER, { background: true, timeoutMs: 0 });
  for (let i = 0; i < 100; i++) {
    const out = await sandbox.commands
      .run("curl -s localhost:8080/inc", { user: "user" })
      .catch(() => undefined);
    if (out?.stdout === "42") return handle.pid;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error("counter did not start");
}

function children(results: (Sandbox | Error)[]): Sandbox[] {
  for (const result of results) if (result instanceof Error) throw result;
  return results as Sandbox[];
}

describe("fork", () => {
  it("×16: every child has the source's memory; their changes stay their own", async () => {
    const source = await Sandbox.create({ metadata: { role: "source" } });
    const forks: Sandbox[] = [];
    try {
      const pid = await startCounter(source);
      await source.commands.run("echo disk > /home/user/f");
      forks.push(...children(await source.fork({ count: 16 })));
      assert.equal(forks.length, 16);
      assert.equal(new Set(forks.map((f) => f.sandboxId)).size, 16, "own ids");

      const seen = await Promise.all(
        forks.map(async (f) => {
          const out = await f.commands.run(`cat /home/user/f; ps -o pid= -p ${pid}`);
          return `${await counter(f)} ${out.stdout.replace(/\s+/g, " ").trim()}`;
        }),
      );
      assert.deepEqual(
        new Set(seen),
        new Set([`42 disk ${pid}`]),
        "memory, disk and pid inherited",
      );

      assert.equal(await counter(forks[0] as Sandbox, "/inc"), "43");
      await (forks[0] as Sandbox).commands.run("echo changed > /home/user/f");
      assert.equal(await counter(forks[1] as Sandbox), "42", "a sibling does not see it");
      assert.equal(await counter(source), "42", "the source does not see it");
      assert.equal((await source.commands.run("cat /home/user/f")).stdout, "disk\n");
      assert.equal(await counter(source, "/inc"), "43");
      assert.equal(await counter(forks[2] as Sandbox), "42", "children do not see the source");

      const info = await Sandbox.getInfo((forks[3] as Sandbox).sandboxId);
      assert.deepEqual(info.metadata, { role: "source" });
      assert.equal((await Sandbox.getInfo(source.sandboxId)).state, "running");
    } finally {
      await Promise.all([source, ...forks].map((s) => s.kill()));
    }
  });

  it("forks a paused sandbox without resuming it, and forks a fork", async () => {
    const source = await Sandbox.create();
    const made: Sandbox[] = [];
    try {
      await startCounter(source);
      await source.pause();
      const [child] = children(await Sandbox.fork(source.sandboxId, { count: 1 }));
      made.push(child as Sandbox);
      assert.equal(
        (await Sandbox.getInfo(source.sandboxId)).state,
        "paused",
        "source stays paused",
      );
      assert.equal(await counter(child as Sandbox, "/inc"), "43");

      const [grandchild] = children(await (child as Sandbox).fork({ count: 1 }));
      made.push(grandchild as Sandbox);
      assert.equal(await counter(grandchild as Sandbox, "/inc"), "44", "continues from the child");
      assert.equal(await counter(child as Sandbox), "43");
    } finally {
      await Promise.all([source, ...made].map((s) => s.kill()));
    }
  });

  it("a chain of pauses and forks deeper than the flatten depth is flattened; nothing is lost", async () => {
    // WARREN_FLATTEN_DEPTH defaults to 8; twelve generations pass it.
    let current = await Sandbox.create();
    const made: Sandbox[] = [current];
    try {
      await startCounter(current);
      for (let generation = 1; generation <= 12; generation++) {
        await current.commands.run(`echo ${generation} > /home/user/gen-${generation}`);
        if (generation % 2 === 0) {
          await current.pause();
          current = await Sandbox.connect(current.sandboxId);
        } else {
          const [child] = children(await current.fork({ count: 1 }));
          await current.kill();
          current = child as Sandbox;
          made.push(current);
        }
      }
      const isFlattened = (line: LogLine) => line.msg === "snapshot.flattened";
      await waitFor("a snapshot.flattened log line", () => server.logs.some(isFlattened), 60_000);
      const flattened = server.logs.find(isFlattened) as LogLine;
      assert.ok(Number(flattened.layers) > 8, `flattened at ${flattened.layers} layers`);

      // Every generation's file and the process's memory survive, also after one more pause.
      const expected = Array.from({ length: 12 }, (_, i) => `${i + 1}`).join(" ");
      const cat = "cat $(ls /home/user/gen-* | sort -t- -k2 -n) | xargs";
      assert.equal((await current.commands.run(cat)).stdout.trim(), expected);
      await current.pause();
      current = await Sandbox.connect(current.sandboxId);
      assert.equal((await current.commands.run(cat)).stdout.trim(), expected);
      assert.equal(await counter(current, "/inc"), "43");

      // The disk chain under the sandbox is as short as the catalog says, and within the depth.
      const catalog = await SqliteCatalog.open(join(server.dataDir, "catalog.sqlite"));
      try {
        const layers: string[] = [];
        let id = (await catalog.getSandbox(current.sandboxId))?.snapshotId;
        let dir = "";
        for (; id; id = (await catalog.getSnapshot(id))?.parentId) {
          const row = await catalog.getSnapshot(id);
          if (!row || row.kind === "template") break;
          if (!dir) dir = row.dir;
          layers.push(id);
        }
        assert.ok(layers.length <= 8, `${layers.length} layers above the template`);
        const { stdout } = await promisify(execFile)("qemu-img", [
          "info",
          "-U",
          "--backing-chain",
          "--output=json",
          join(dir, "disk.qcow2"),
        ]);
        // base image + template capture + the layers above it.
        assert.equal((JSON.parse(stdout) as unknown[]).length, layers.length + 2);
      } finally {
        await catalog.close();
      }
    } finally {
      await Promise.all(made.map((s) => s.kill()));
    }
  });

  it("answers 404 for an unknown sandbox and 400 past the fork limit", async () => {
    assert.equal((await api(server, "POST", "/sandboxes/nosuch/fork", { count: 1 })).status, 404);
    const source = await Sandbox.create();
    try {
      const res = await api(server, "POST", `/sandboxes/${source.sandboxId}/fork`, { count: 17 });
      assert.equal(res.status, 400);
    } finally {
      await source.kill();
    }
  });
});

describe("snapshots", () => {
  it("a snapshot creates sandboxes, is listed, and cannot be deleted while in use", async () => {
    const source = await Sandbox.create();
    let fromSnapshot: Sandbox | undefined;
    try {
      await startCounter(source);
      const name = `snap${Date.now()}`;
      const snapshot = await source.createSnapshot({ name });
      assert.equal(snapshot.snapshotId, `${name}:default`);
      assert.equal((await Sandbox.getInfo(source.sandboxId)).state, "running");

      const listed = await Sandbox.listSnapshots({ sandboxId: source.sandboxId }).nextItems();
      assert.deepEqual(
        listed.map((s) => s.snapshotId),
        [snapshot.snapshotId],
      );

      fromSnapshot = await Sandbox.create(snapshot.snapshotId);
      assert.equal(await counter(fromSnapshot, "/inc"), "43");

      const refused = await api(
        server,
        "DELETE",
        `/templates/${encodeURIComponent(snapshot.snapshotId)}`,
      );
      assert.equal(refused.status, 409);
      assert.match(
        String((refused.body as { message: string }).message),
        new RegExp(fromSnapshot.sandboxId),
      );

      await fromSnapshot.kill();
      fromSnapshot = undefined;
      assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), true);
      assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId), false);
      await assert.rejects(Sandbox.create(snapshot.snapshotId));
    } finally {
      await fromSnapshot?.kill();
      await source.kill();
    }
  });

  it("a stored snapshot forks ×8 with its source gone: each child has its files and process", async () => {
    const source = await Sandbox.create();
    await startCounter(source);
    await source.files.write("/home/user/kept.txt", "from the snapshot");
    const { snapshotId } = await source.createSnapshot();
    await source.kill();
    const children: string[] = [];
    try {
      const res = await api(server, "POST", `/snapshots/${encodeURIComponent(snapshotId)}/fork`, {
        count: 8,
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const results = res.body as { sandbox?: { sandboxID: string }; error?: unknown }[];
      assert.equal(results.length, 8);
      for (const result of results) {
        assert.ok(result.sandbox, `a child failed: ${JSON.stringify(result.error)}`);
        children.push(result.sandbox.sandboxID);
      }
      assert.equal(new Set(children).size, 8);
      for (const id of children) {
        const child = await Sandbox.connect(id);
        assert.equal(await child.files.read("/home/user/kept.txt"), "from the snapshot");
        assert.equal(
          await counter(child, "/inc"),
          "43",
          `${id}: the snapshot's process, its own now`,
        );
      }
      const unknown = await api(server, "POST", "/snapshots/nosuchsnapshot/fork", { count: 1 });
      assert.equal(unknown.status, 404);
    } finally {
      await Promise.all(children.map((id) => Sandbox.kill(id)));
      await Sandbox.deleteSnapshot(snapshotId);
    }
  });
});
