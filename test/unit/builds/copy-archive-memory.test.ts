// A COPY step's archive goes from the upload on disk to the build VM's envd as a stream: a
// 200 MiB archive does not grow the server's memory by anything like its size (before, it was
// read whole, rewritten whole, then sent). The archive is a sparse file (no disk used); envd
// is a STAND-IN (a plain HTTP server on a loopback address of its own) that counts the bytes.
import assert from "node:assert/strict";
import { createReadStream } from "node:fs";
import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { Header } from "tar";
import { linkSafeArchive } from "../../../src/builds/copy-archive.js";
import { GuestShell } from "../../../src/builds/guest-shell.js";

const SIZE = 200 * 1024 * 1024;
const dir = await mkdtemp(join(tmpdir(), "warren-copy-memory-"));
after(() => rm(dir, { recursive: true, force: true }));

/** A tar of one 200 MiB file of zeros, written as a sparse file. */
async function bigArchive(): Promise<string> {
  const path = join(dir, "big.tar");
  const header = Buffer.alloc(512);
  new Header({
    path: "app/big.bin",
    type: "File",
    mode: 0o644,
    size: SIZE,
    mtime: new Date(1_700_000_000_000),
  }).encode(header);
  await writeFile(path, header);
  await truncate(path, 512 + SIZE + 1024);
  return path;
}

/** envd's POST /files, counting what arrives. */
async function countingEnvd(): Promise<{
  host: string;
  received: () => number;
  close: () => Promise<void>;
}> {
  let received = 0;
  const server = createServer((req, res) => {
    req.on("data", (chunk: Buffer) => {
      received += chunk.length;
    });
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("[]"));
  });
  const byte = () => 1 + Math.floor(Math.random() * 254);
  const host = `127.${byte()}.${byte()}.${byte()}`;
  await new Promise<void>((resolve) => server.listen(49983, host, resolve));
  return {
    host,
    received: () => received,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Off-heap and heap bytes in use now. */
function inUse(): number {
  const usage = process.memoryUsage();
  return usage.arrayBuffers + usage.heapUsed;
}

it("a 200 MiB COPY archive reaches envd without the server holding it in memory", async () => {
  const archive = await bigArchive();
  const envd = await countingEnvd();
  const shell = new GuestShell(envd.host, "token");
  after(async () => {
    shell.close();
    await envd.close();
  });
  const before = inUse();
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, inUse());
  }, 5);
  try {
    const upload = await linkSafeArchive(() => createReadStream(archive));
    await shell.upload("/tmp/.warren-upload.tar", upload, "root", { timeoutMs: 120_000 });
    peak = Math.max(peak, inUse());
  } finally {
    clearInterval(sampler);
  }
  assert.ok(envd.received() >= SIZE, `envd got the whole archive (${envd.received()} bytes)`);
  const grewMiB = Math.round((peak - before) / 1024 / 1024);
  assert.ok(grewMiB < 64, `memory grew by ${grewMiB} MiB for a 200 MiB archive`);
});
