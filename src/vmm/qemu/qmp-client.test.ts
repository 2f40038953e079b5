import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  type FakeQmpPeer,
  fakeQmpPeer,
  type QmpCommand,
  sendEndlessLine,
  sendQmp,
} from "../../../test/fakes/fake-qmp-peer.js";
import { QmpError, VmmError } from "../errors.js";
import { QmpClient } from "./qmp-client.js";

const dir = mkdtempSync(join(tmpdir(), "warren-qmp-"));
let n = 0;

/** A fake QMP peer (test/fakes) at a fresh socket path. */
function fakeQemu(
  reply: (cmd: QmpCommand, socket: Socket) => void,
  greet = true,
): Promise<FakeQmpPeer> {
  return fakeQmpPeer(join(dir, `qmp-${++n}.sock`), reply, greet);
}

const send = sendQmp;

describe("QmpClient (against a fake QMP server)", () => {
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("negotiates capabilities, matches replies by id and delivers events", async () => {
    const seen: string[] = [];
    const { path, server } = await fakeQemu((cmd, socket) => {
      seen.push(cmd.execute);
      if (cmd.execute === "query-status") {
        send(socket, { event: "STOP", data: {} });
        send(socket, { return: { status: "paused" }, id: cmd.id });
      } else send(socket, { return: {}, id: cmd.id });
    });
    const qmp = await QmpClient.connect(path, "vm1");
    const stopped = qmp.waitForEvent("STOP");
    assert.deepEqual(await qmp.execute("query-status"), { status: "paused" });
    assert.equal((await stopped).event, "STOP");
    assert.deepEqual(seen, ["qmp_capabilities", "query-status"]);
    qmp.close();
    server.close();
  });

  it("turns a QMP error into a QmpError naming the command", async () => {
    const { path, server } = await fakeQemu((cmd, socket) => {
      if (cmd.execute === "qmp_capabilities") send(socket, { return: {}, id: cmd.id });
      else send(socket, { error: { class: "GenericError", desc: "no such thing" }, id: cmd.id });
    });
    const qmp = await QmpClient.connect(path, "vm2");
    await assert.rejects(
      qmp.execute("blockdev-snapshot-sync", { device: "root" }),
      (err: unknown) => {
        assert.ok(err instanceof QmpError);
        assert.equal(err.command, "blockdev-snapshot-sync");
        assert.equal(err.errorClass, "GenericError");
        assert.match(
          err.message,
          /vm vm2: QMP blockdev-snapshot-sync failed: GenericError: no such thing/,
        );
        return true;
      },
    );
    qmp.close();
    server.close();
  });

  it("fails pending commands, and a connect without greeting, when QEMU goes away", async () => {
    const { path, server } = await fakeQemu((cmd, socket) => {
      if (cmd.execute === "qmp_capabilities") send(socket, { return: {}, id: cmd.id });
      else socket.destroy();
    });
    const qmp = await QmpClient.connect(path);
    await assert.rejects(qmp.execute("stop"), VmmError);
    await assert.rejects(qmp.execute("cont"), /closed|error/);
    server.close();

    const silent = await fakeQemu(() => {}, false);
    silent.server.on("connection", (socket) => socket.destroy());
    await assert.rejects(QmpClient.connect(silent.path), VmmError);
    silent.server.close();
  });
  it("fails the connection, never the server, on a message that does not end", {
    timeout: 20_000,
  }, async () => {
    let sent: Promise<number> | undefined;
    const peer = await fakeQemu((cmd, socket) => {
      if (cmd.execute === "qmp_capabilities") send(socket, { return: {}, id: cmd.id });
      else sent = sendEndlessLine(socket, 512 << 20);
    });
    const qmp = await QmpClient.connect(peer.path, "vm3");
    const heapBefore = process.memoryUsage().heapUsed;
    await assert.rejects(qmp.execute("stop"), (err: unknown) => {
      assert.ok(err instanceof VmmError);
      assert.match(err.message, /vm vm3: QMP message longer than 1048576 bytes/);
      return true;
    });
    assert.ok(((await sent) ?? 0) < 64 << 20, "hung up long before the peer was done");
    assert.ok(process.memoryUsage().heapUsed - heapBefore < 32 << 20, "nothing much buffered");
    await assert.rejects(qmp.execute("cont"), /longer than/);
    peer.close();

    // The same from the first line on: a greeting without end.
    const greeter = await fakeQemu(() => {}, false);
    greeter.server.on("connection", (socket) => void sendEndlessLine(socket, 512 << 20));
    await assert.rejects(QmpClient.connect(greeter.path, "vm4"), /QMP message longer than/);
    greeter.close();
  });

  it("times out a command QEMU never answers, and a greeting that never comes", {
    timeout: 20_000,
  }, async () => {
    const peer = await fakeQemu((cmd, socket) => {
      if (cmd.execute === "qmp_capabilities") send(socket, { return: {}, id: cmd.id });
    });
    const qmp = await QmpClient.connect(peer.path, "vm5", { commandTimeoutMs: 300 });
    const started = performance.now();
    await assert.rejects(qmp.execute("stop"), (err: unknown) => {
      assert.ok(err instanceof VmmError);
      assert.match(err.message, /vm vm5: QMP stop got no answer within 300 ms/);
      return true;
    });
    assert.ok(performance.now() - started < 5_000);
    qmp.close();
    peer.close();

    const silent = await fakeQemu(() => {}, false);
    await assert.rejects(
      QmpClient.connect(silent.path, "vm6", { connectTimeoutMs: 300 }),
      /vm vm6: QEMU sent no QMP greeting within 300 ms/,
    );
    silent.close();
  });
});
