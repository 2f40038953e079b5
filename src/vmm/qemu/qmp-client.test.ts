import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { QmpError, VmmError } from "../errors.js";
import { QmpClient } from "./qmp-client.js";

const dir = mkdtempSync(join(tmpdir(), "warren-qmp-"));
let n = 0;

/**
 * A fake QMP server (stands in for QEMU, which the VM tests drive for real): greets, then
 * answers each command through `reply`.
 */
function fakeQemu(
  reply: (cmd: { execute: string; id: number }, socket: Socket) => void,
  greet = true,
): Promise<{ path: string; server: Server }> {
  const path = join(dir, `qmp-${++n}.sock`);
  const server = createServer((socket) => {
    if (greet) socket.write(`${JSON.stringify({ QMP: { version: {}, capabilities: [] } })}\r\n`);
    let buffer = "";
    socket.on("data", (chunk) => {
      buffer += chunk.toString();
      let i = buffer.indexOf("\n");
      while (i >= 0) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 1);
        if (line.trim()) reply(JSON.parse(line), socket);
        i = buffer.indexOf("\n");
      }
    });
  });
  return new Promise((resolve) => server.listen(path, () => resolve({ path, server })));
}

const send = (socket: Socket, message: unknown) => socket.write(`${JSON.stringify(message)}\r\n`);

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
});
