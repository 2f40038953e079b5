// The keeper for real, as a process of its own (src/keeper/main.ts, as this user: the unit
// tier has no root, so no cgroups and no taps here), holding stand-in "QEMUs": Node under
// the name qemu-system-x86_64, first on the keeper's PATH, idling with an argument under the
// run dir (what the watchdog finds a VMM by when there are no cgroups). The server's side is
// the real KeeperClient; hostile lines go over a raw socket.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { KEEPER_MAX_LINE_BYTES, KEEPER_SOCKET_NAME } from "../protocol/keeper.js";
import { isAlive } from "../shared/process-alive.js";
import { KeeperClient } from "../vmm/qemu/keeper-client.js";

const ENTRY = fileURLToPath(new URL("./main.ts", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "warren-keeper-"));
const stubs = join(work, "bin");
mkdirSync(stubs);
symlinkSync(process.execPath, join(stubs, "qemu-system-x86_64"));
const runDir = join(work, "run");
mkdirSync(runDir);

/** A stand-in QEMU's arguments: says it started on stderr, then idles (or exits with `code`). */
function standIn(name: string, code?: number): string[] {
  const body =
    code === undefined
      ? "process.stderr.write('stand-in up\\n'); setInterval(() => {}, 60000);"
      : `process.stderr.write('stand-in failing\\n'); process.exit(${code});`;
  return ["-e", body, join(runDir, name, "disk.qcow2")];
}

const keepers = new Set<ChildProcess>();
after(() => {
  for (const keeper of keepers) keeper.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
});

let dirs = 0;
/** Starts a keeper process in a directory of its own (or `dir`); resolves once it listens. */
async function startKeeper(options: { dir?: string; idleMs?: number } = {}) {
  const dir = options.dir ?? join(work, `keeper-${++dirs}`);
  const args = ["--dir", dir, "--run-dir", runDir, "--log-stderr"];
  if (options.idleMs !== undefined) args.push("--exit-when-idle-ms", String(options.idleMs));
  const child = spawn(process.execPath, ["--import", import.meta.resolve("tsx"), ENTRY, ...args], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { PATH: `${stubs}:${process.env.PATH}`, WARREN_LOG_LEVEL: "info" },
  });
  keepers.add(child);
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    log += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const socketPath = join(dir, KEEPER_SOCKET_NAME);
  const started = await Promise.race([
    (async () => {
      while (!log.includes("keeper.started")) {
        if (child.exitCode !== null || child.signalCode !== null) return false;
        await sleep(20);
      }
      return true;
    })(),
    exited.then(() => false),
  ]);
  return { child, dir, socketPath, exited, started, log: () => log };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function gone(pid: number, withinMs: number): Promise<boolean> {
  for (const end = Date.now() + withinMs; Date.now() < end; ) {
    if (!isAlive(pid)) return true;
    await sleep(20);
  }
  return !isAlive(pid);
}

/** Whether /proc says `pid`'s stderr carries the stand-in's line yet (it starts in ~50 ms). */
const spawnRequest = (vmId: string, code?: number) => ({
  vmId,
  args: standIn(vmId, code),
  network: { kind: "none" as const },
});

/** A raw connection, with every line the keeper sends. */
async function raw(path: string) {
  const socket: Socket = connect(path);
  await new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const messages: Record<string, unknown>[] = [];
  let buffered = "";
  socket.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      messages.push(JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>);
      buffered = buffered.slice(nl + 1);
    }
  });
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.on("error", () => {});
  const answer = async (id: number) => {
    for (let i = 0; i < 200; i++) {
      const found = messages.find((m) => m.id === id);
      if (found) return found;
      await sleep(10);
    }
    throw new Error(`no answer to request ${id}`);
  };
  const send = (value: unknown) => socket.write(`${JSON.stringify(value)}\n`);
  return { socket, messages, closed, answer, send };
}

describe("the keeper", () => {
  it("spawns, notes, lists and kills VMMs for its server, with their stderr's tail", async () => {
    const keeper = await startKeeper();
    assert.ok(keeper.started, keeper.log());
    const socket = statSync(keeper.socketPath);
    assert.ok(socket.isSocket());
    assert.equal(socket.mode & 0o777, 0o600);
    assert.equal(statSync(keeper.dir).mode & 0o777, 0o700);
    const client = await KeeperClient.connect({ socketPath: keeper.socketPath });
    assert.equal(client.keeperPid, keeper.child.pid);
    assert.deepEqual(client.held(), []);
    const vm = await client.spawn(spawnRequest("vm1"));
    assert.ok(isAlive(vm.pid));
    await client.note("vm1", '{"record":1}');
    const failing = await client.spawn(spawnRequest("vm2", 7));
    const crash = await failing.exited;
    assert.equal(crash.expected, false);
    assert.equal(crash.code, 7);
    assert.match(crash.reason, /code 7[\s\S]*stand-in failing/);
    await sleep(200); // its stderr line is in the keeper's tail by now
    const killed = await vm.kill();
    assert.equal(killed.expected, true);
    assert.equal(killed.signal, "SIGKILL");
    assert.equal(isAlive(vm.pid), false);
    await assert.rejects(client.note("vm1", "{}"), /no VMM vm1 is held/);
    client.close();
    keeper.child.kill("SIGTERM");
    assert.equal(await keeper.exited, 0);
    assert.equal(existsSync(keeper.socketPath), false, "its socket goes with it");
  });

  it("holds VMMs while no server is connected, and hands them and their notes to the next", async () => {
    const keeper = await startKeeper();
    const first = await KeeperClient.connect({ socketPath: keeper.socketPath });
    const vm = await first.spawn(spawnRequest("held"));
    await first.note("held", "record of held");
    const short = await first.spawn(spawnRequest("short"));
    first.close(); // the server goes (as a kill -9 would close its socket)
    await sleep(100);
    assert.ok(isAlive(vm.pid), "its VMM runs on without a server");
    process.kill(short.pid, "SIGKILL"); // dies while no server listens
    await sleep(200);
    const next = await KeeperClient.connect({ socketPath: keeper.socketPath });
    assert.deepEqual(
      next.held().map((h) => [h.process.vmId, h.process.pid, h.note]),
      [["held", vm.pid, "record of held"]],
    );
    assert.deepEqual(
      next.exitsWhileAway.map((e) => [e.key, e.signal, e.killed]),
      [["short", "SIGKILL", false]],
    );
    const held = next.held()[0]?.process;
    assert.ok(held);
    await held.kill();
    assert.equal(isAlive(vm.pid), false);
    next.close();
    keeper.child.kill("SIGTERM");
    await keeper.exited;
  });

  it("serves one server at a time", async () => {
    const keeper = await startKeeper();
    const server = await KeeperClient.connect({ socketPath: keeper.socketPath });
    await assert.rejects(
      KeeperClient.connect({ socketPath: keeper.socketPath, connectTimeoutMs: 300 }),
      /another server .* is connected/,
    );
    server.close();
    const next = await KeeperClient.connect({ socketPath: keeper.socketPath });
    next.close();
    keeper.child.kill("SIGTERM");
    await keeper.exited;
  });

  it("answers what it cannot read with an error, and cuts a line past its bound", async () => {
    const keeper = await startKeeper();
    const peer = await raw(keeper.socketPath);
    peer.send({ id: 1, type: "spawn", key: "x", args: [], cgroupProcs: [], mergeable: false });
    assert.match(String((await peer.answer(1)).error), /say hello first/);
    peer.send({ id: 2, type: "hello", version: 1, serverPid: process.pid });
    assert.equal((await peer.answer(2)).ok, true);
    const bad = [
      [{ type: "spawn", key: "../x", args: [], cgroupProcs: [], mergeable: false }, /key/],
      [{ type: "spawn", key: "x", args: "a", cgroupProcs: [], mergeable: false }, /args/],
      [{ type: "spawn", key: "x", args: [], cgroupProcs: ["/tmp/x"], mergeable: false }, /cgroup/],
      [
        { type: "spawn", key: "x", args: Array(513).fill("a"), cgroupProcs: [], mergeable: false },
        /args/,
      ],
      [{ type: "spawn", key: "x", args: [], cgroupProcs: [], mergeable: "yes" }, /mergeable/],
      [
        {
          type: "spawn",
          key: "x",
          args: [],
          cgroupProcs: [],
          mergeable: false,
          tap: { netns: "n", name: "a/b" },
        },
        /tap/,
      ],
      [{ type: "note", key: "x", note: "n".repeat(300_000) }, /note/],
      [{ type: "reboot-host" }, /unknown request type/],
    ] as const;
    let id = 10;
    for (const [request, error] of bad) {
      peer.send({ ...request, id: ++id });
      const answer = await peer.answer(id);
      assert.equal(answer.ok, false);
      assert.match(String(answer.error), error);
    }
    peer.socket.write("this is no JSON\n");
    peer.send({ id: 99, type: "list" });
    assert.deepEqual((await peer.answer(99)).result, [], "a bad line changes nothing");
    // A line longer than the bound, never ended: the keeper cuts the connection.
    peer.socket.write("x".repeat(KEEPER_MAX_LINE_BYTES + 10));
    await peer.closed;
    assert.equal(keeper.child.exitCode, null, "the keeper runs on");
    const next = await KeeperClient.connect({ socketPath: keeper.socketPath });
    next.close();
    keeper.child.kill("SIGTERM");
    await keeper.exited;
  });

  it("stops once idle (holding no VMM, no server connected) when started for a server", async () => {
    const keeper = await startKeeper({ idleMs: 300 });
    const client = await KeeperClient.connect({ socketPath: keeper.socketPath });
    const vm = await client.spawn(spawnRequest("idle"));
    client.close();
    await sleep(700);
    assert.equal(keeper.child.exitCode, null, "it holds a VMM: it stays");
    process.kill(vm.pid, "SIGKILL");
    assert.equal(await keeper.exited, 0);
    assert.equal(existsSync(keeper.socketPath), false);
  });

  it("an idle stop kills nothing it does not hold; a stop by signal kills what its watchdog finds", async () => {
    // A QEMU of someone else's under the run dir (a test's own driver, in CI's shared VM
    // cgroups): what the keeper finds by its watchdog's fallback, but never held.
    const stranger = () =>
      spawn("qemu-system-x86_64", standIn("stranger"), {
        stdio: "ignore",
        env: { PATH: `${stubs}:${process.env.PATH}` },
      });
    const first = stranger();
    const idle = await startKeeper({ idleMs: 200 });
    assert.equal(await idle.exited, 0);
    await sleep(300);
    assert.ok(isAlive(first.pid as number), "an idle keeper's stop killed a VMM it never held");
    first.kill("SIGKILL");

    const second = stranger();
    const stopped = await startKeeper();
    stopped.child.kill("SIGTERM");
    await stopped.exited;
    assert.ok(await gone(second.pid as number, 5_000), "a stopped keeper leaves VMMs behind");
  });

  it("a client starts a keeper when none answers, and connects again once it is gone", async () => {
    const dir = join(work, "launched");
    const launched: ReturnType<typeof startKeeper>[] = [];
    const client = await KeeperClient.connect({
      socketPath: join(dir, KEEPER_SOCKET_NAME),
      launch: () => {
        launched.push(startKeeper({ dir }));
      },
    });
    assert.equal(launched.length, 1);
    const vm = await client.spawn(spawnRequest("before"));
    const keeper = await launched[0];
    assert.ok(keeper);
    keeper.child.kill("SIGKILL");
    const exit = await vm.exited;
    assert.equal(exit.expected, false);
    assert.match(exit.reason, /keeper exited/);
    assert.ok(await gone(vm.pid, 5_000), "the watchdog killed its VMM");
    const after = await client.spawn(spawnRequest("after"));
    assert.equal(launched.length, 2, "a new keeper was started");
    assert.ok(isAlive(after.pid));
    await after.kill();
    client.close();
    (await launched[1])?.child.kill("SIGTERM");
  });

  it("kill -9 of the keeper kills its VMMs within 5 s; a second keeper refuses a live socket", async () => {
    const keeper = await startKeeper();
    const second = await startKeeper({ dir: keeper.dir });
    assert.equal(second.started, false);
    assert.equal(await second.exited, 3, second.log());
    const client = await KeeperClient.connect({ socketPath: keeper.socketPath });
    const vms = [await client.spawn(spawnRequest("a")), await client.spawn(spawnRequest("b"))];
    client.close();
    keeper.child.kill("SIGKILL");
    for (const vm of vms)
      assert.ok(await gone(vm.pid, 5_000), `VMM ${vm.vmId} outlived the keeper`);
    // Its socket is left, dead: the next keeper takes it.
    const next = await startKeeper({ dir: keeper.dir });
    assert.ok(next.started, next.log());
    next.child.kill("SIGTERM");
    await next.exited;
  });
});
