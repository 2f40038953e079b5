// envd directory watching: the streaming WatchDir through the real E2B SDK, and the polling
// watcher RPCs (CreateWatcher / GetWatcherEvents / RemoveWatcher) that the Python SDK uses.
import assert from "node:assert/strict";
import { readdirSync, readlinkSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { after, before, describe, it, type TestContext } from "node:test";
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import {
  FileNotFoundError,
  type FilesystemEvent,
  FilesystemEventType,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  type WatchHandle,
} from "e2b";
import { EventType, Filesystem } from "../../../src/protocol/gen/filesystem/filesystem_pb.js";
import { type RunningEnvd, startEnvd, userWorkdir } from "../../helpers/envd.js";

let env: RunningEnvd;
let sbx: Sandbox;
let rpc: Client<typeof Filesystem>;

before(async () => {
  env = await startEnvd();
  sbx = await Sandbox.create();
  rpc = createClient(Filesystem, createConnectTransport({ baseUrl: env.url, httpVersion: "1.1" }));
});

after(async () => {
  await env?.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How many inotify instances the agent process holds open. */
function inotifyFds(): number {
  const fdDir = `/proc/${env.process.pid}/fd`;
  return readdirSync(fdDir).filter((fd) => {
    try {
      return readlinkSync(`${fdDir}/${fd}`) === "anon_inode:inotify";
    } catch {
      return false;
    }
  }).length;
}

interface Recorder {
  readonly events: FilesystemEvent[];
  /** Resolves with the first event (seen so far or later) matching type and name. */
  waitFor(type: FilesystemEventType, name: string, timeoutMs?: number): Promise<FilesystemEvent>;
}

/** Starts watchDir on `dir`, records every event and stops the watch when the test ends. */
async function watch(
  t: TestContext,
  dir: string,
  opts: { recursive?: boolean; includeEntry?: boolean } = {},
): Promise<Recorder & { handle: WatchHandle }> {
  const events: FilesystemEvent[] = [];
  const handle = await sbx.files.watchDir(
    dir,
    (event) => {
      events.push(event);
    },
    opts,
  );
  t.after(() => handle.stop());
  return {
    events,
    handle,
    async waitFor(type, name, timeoutMs = 5_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = events.find((e) => e.type === type && e.name === name);
        if (found) return found;
        if (Date.now() > deadline) {
          const seen = events.map((e) => `${e.type}:${e.name}`).join(", ");
          assert.fail(`no ${type} event for '${name}' within ${timeoutMs} ms; got [${seen}]`);
        }
        await sleep(20);
      }
    },
  };
}

const { CREATE, WRITE, REMOVE, RENAME, CHMOD } = FilesystemEventType;

/** The error watchDir(path) rejects with (fails the test if the watch starts). */
async function watchError(path: string): Promise<unknown> {
  try {
    const handle = await sbx.files.watchDir(path, () => {});
    await handle.stop();
  } catch (err) {
    return err;
  }
  assert.fail(`watchDir(${path}) resolved`);
}

describe("watchDir (streaming)", () => {
  it("reports WRITE 'file.txt' when an existing file is written", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/file.txt`, "first");
    const w = await watch(t, dir);
    await sbx.files.write(`${dir}/file.txt`, "second");
    await w.waitFor(WRITE, "file.txt");
  });

  it("reports CREATE for a new file", async (t) => {
    const dir = await userWorkdir(t);
    const w = await watch(t, dir);
    await sbx.files.write(`${dir}/new.txt`, "content");
    await w.waitFor(CREATE, "new.txt");
    await w.waitFor(WRITE, "new.txt");
    assert.equal(w.events[0]?.type, CREATE, "the first event for a new file is CREATE");
  });

  it("reports REMOVE when a file is removed", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/gone.txt`, "x");
    const w = await watch(t, dir);
    await sbx.files.remove(`${dir}/gone.txt`);
    await w.waitFor(REMOVE, "gone.txt");
  });

  it("reports RENAME for the old name, then CREATE for the new name", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/old.txt`, "x");
    const w = await watch(t, dir);
    await sbx.files.rename(`${dir}/old.txt`, `${dir}/new.txt`);
    const renamed = await w.waitFor(RENAME, "old.txt");
    const created = await w.waitFor(CREATE, "new.txt");
    assert.ok(w.events.indexOf(renamed) < w.events.indexOf(created), "RENAME comes before CREATE");
  });

  it("reports CHMOD after chmod", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/file.txt`, "x");
    const w = await watch(t, dir);
    await sbx.commands.run(`chmod 600 ${dir}/file.txt`);
    await w.waitFor(CHMOD, "file.txt");
    assert.ok(!w.events.some((e) => e.type === WRITE), "chmod is not a WRITE");
  });

  it("non-recursive watch ignores changes inside subdirectories", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.makeDir(`${dir}/nested`);
    const w = await watch(t, dir);
    await sbx.files.write(`${dir}/nested/file.txt`, "x");
    await sbx.files.write(`${dir}/sentinel.txt`, "x");
    await w.waitFor(WRITE, "sentinel.txt");
    assert.deepEqual(
      w.events.filter((e) => e.name.includes("/")),
      [],
    );
  });

  it("recursive watch names nested files relative to the watched directory", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/nested/file.txt`, "first");
    const w = await watch(t, dir, { recursive: true });
    await sbx.files.write(`${dir}/nested/file.txt`, "second");
    await w.waitFor(WRITE, "nested/file.txt");
  });

  it("recursive watch follows a subdirectory created after the watch started", async (t) => {
    const dir = await userWorkdir(t);
    const w = await watch(t, dir, { recursive: true });
    await sbx.files.makeDir(`${dir}/nested`);
    await w.waitFor(CREATE, "nested");
    await sbx.files.write(`${dir}/nested/file.txt`, "content");
    await w.waitFor(CREATE, "nested/file.txt");
    await w.waitFor(WRITE, "nested/file.txt");
  });

  it("includeEntry adds the entry to CREATE/WRITE events but not to REMOVE", async (t) => {
    const dir = await userWorkdir(t);
    const w = await watch(t, dir, { includeEntry: true });
    await sbx.files.write(`${dir}/file.txt`, "hello");
    const write = await w.waitFor(WRITE, "file.txt");
    const created = await w.waitFor(CREATE, "file.txt");
    for (const event of [created, write]) {
      const entry = event.entry;
      assert.ok(entry, `${event.type} carries an entry`);
      assert.deepEqual(
        [entry.name, entry.type, entry.path, entry.mode],
        ["file.txt", "file", `${dir}/file.txt`, 0o644],
      );
    }
    // The entry is read when the event is sent (as in envd), so only the WRITE, which follows
    // the chown, is sure to see the final owner and size.
    assert.deepEqual([write.entry?.owner, write.entry?.size], ["user", 5]);
    await sbx.files.remove(`${dir}/file.txt`);
    const removed = await w.waitFor(REMOVE, "file.txt");
    assert.equal(removed.entry, undefined);
  });

  it("watching a missing directory throws FileNotFoundError", async (t) => {
    const dir = await userWorkdir(t);
    const err = await watchError(`${dir}/missing`);
    assert.ok(err instanceof FileNotFoundError, `got ${String(err)}`);
    assert.ok(err instanceof NotFoundError);
  });

  it("watching a file throws InvalidArgumentError", async (t) => {
    const dir = await userWorkdir(t);
    await sbx.files.write(`${dir}/file.txt`, "x");
    const err = await watchError(`${dir}/file.txt`);
    assert.ok(err instanceof InvalidArgumentError, `got ${String(err)}`);
    assert.ok(err instanceof SandboxError);
  });

  it("stop() ends the watch: later changes are not reported, the inotify fd is closed", async (t) => {
    const dir = await userWorkdir(t);
    await sleep(200); // lets watches of earlier tests finish closing
    const baseline = inotifyFds();
    const w = await watch(t, dir);
    assert.equal(inotifyFds(), baseline + 1, "one inotify instance per watch");
    await sbx.files.write(`${dir}/before.txt`, "x");
    await w.waitFor(WRITE, "before.txt");
    await w.handle.stop();
    const count = w.events.length;
    await sbx.files.write(`${dir}/after.txt`, "x");
    await sleep(500);
    assert.deepEqual(w.events.slice(count), []);
    for (let i = 0; i < 20 && inotifyFds() !== baseline; i++) await sleep(100);
    assert.equal(inotifyFds(), baseline, "the agent closed the watcher");
  });
});

describe("polling watcher RPCs", () => {
  const summary = (events: { type: EventType; name: string }[]) =>
    events.map((e) => `${EventType[e.type]}:${e.name}`);

  async function connectCode(promise: Promise<unknown>): Promise<Code> {
    const err = await promise.then(
      () => assert.fail("the call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError, `got ${String(err)}`);
    return err.code;
  }

  it("a new file written via the SDK gives exactly CREATE, CHMOD, WRITE", async (t) => {
    const dir = await userWorkdir(t);
    const { watcherId } = await rpc.createWatcher({ path: dir });
    t.after(() => rpc.removeWatcher({ watcherId }).catch(() => {}));
    assert.ok(watcherId.length > 0);
    await sbx.files.write(`${dir}/test_watch.txt`, "content");
    const { events } = await rpc.getWatcherEvents({ watcherId });
    assert.deepEqual(summary(events), [
      "CREATE:test_watch.txt",
      "CHMOD:test_watch.txt",
      "WRITE:test_watch.txt",
    ]);
    assert.deepEqual(
      (await rpc.getWatcherEvents({ watcherId })).events,
      [],
      "events are returned once",
    );
  });

  it("overwriting an existing file reports WRITE first", async (t) => {
    const dir = await userWorkdir(t);
    await writeFile(`${dir}/f.txt`, "original content");
    const { watcherId } = await rpc.createWatcher({ path: dir });
    t.after(() => rpc.removeWatcher({ watcherId }).catch(() => {}));
    await sbx.files.write(`${dir}/f.txt`, "new");
    const { events } = await rpc.getWatcherEvents({ watcherId });
    assert.ok(events.length > 0, "events were queued before the upload returned");
    assert.deepEqual(summary(events.slice(0, 1)), ["WRITE:f.txt"]);
    assert.ok(!events.some((e) => e.type === EventType.CREATE), "no CREATE on overwrite");
  });

  it("a recursive watcher names new nested files relative to the root", async (t) => {
    const dir = await userWorkdir(t);
    await mkdir(`${dir}/nested`);
    const { watcherId } = await rpc.createWatcher({ path: dir, recursive: true });
    t.after(() => rpc.removeWatcher({ watcherId }).catch(() => {}));
    await sbx.files.write(`${dir}/nested/test_watch.txt`, "content");
    const { events } = await rpc.getWatcherEvents({ watcherId });
    assert.deepEqual(summary(events), [
      "CREATE:nested/test_watch.txt",
      "CHMOD:nested/test_watch.txt",
      "WRITE:nested/test_watch.txt",
    ]);
  });

  it("includeEntry fills the entry of polled events", async (t) => {
    const dir = await userWorkdir(t);
    const { watcherId } = await rpc.createWatcher({ path: dir, includeEntry: true });
    t.after(() => rpc.removeWatcher({ watcherId }).catch(() => {}));
    await sbx.files.write(`${dir}/e.txt`, "abc");
    const { events } = await rpc.getWatcherEvents({ watcherId });
    assert.ok(events.length > 0);
    for (const event of events)
      assert.equal(event.entry?.path, `${dir}/e.txt`, EventType[event.type]);
  });

  it("RemoveWatcher stops the watcher: its id is then NotFound", async (t) => {
    const dir = await userWorkdir(t);
    const { watcherId } = await rpc.createWatcher({ path: dir });
    await rpc.removeWatcher({ watcherId });
    assert.equal(await connectCode(rpc.getWatcherEvents({ watcherId })), Code.NotFound);
    assert.equal(await connectCode(rpc.removeWatcher({ watcherId })), Code.NotFound);
    assert.equal(
      await connectCode(rpc.getWatcherEvents({ watcherId: "w-unknown" })),
      Code.NotFound,
    );
  });

  it("CreateWatcher rejects a missing path (NotFound) and a file (InvalidArgument)", async (t) => {
    const dir = await userWorkdir(t);
    await writeFile(`${dir}/f.txt`, "x");
    assert.equal(await connectCode(rpc.createWatcher({ path: `${dir}/missing` })), Code.NotFound);
    assert.equal(
      await connectCode(rpc.createWatcher({ path: `${dir}/f.txt` })),
      Code.InvalidArgument,
    );
  });
});
