// GuestShell (template builds' client of envd in a build VM) against a hostile envd: a RUN
// step runs as root and may replace envd with anything. Each call fails within its bound
// (the step timeout, the call timeout, the build's signal), reads no more than its limits
// and hangs up on the guest. No VM: the stand-in listens on a loopback address of its own.
import assert from "node:assert/strict";
import { createReadStream } from "node:fs";
import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { describe, it, type TestContext } from "node:test";
import { Header } from "tar";
import { linkSafeArchive } from "../../../src/builds/copy-archive.js";
import { GuestShell } from "../../../src/builds/guest-shell.js";
import { WarrenError } from "../../../src/shared/index.js";
import { failsWithin, HostileEnvd, type HostileMode } from "../../helpers/hostile-envd.js";

const SLACK_MS = 1_500;
const ROOT = { user: "root", envVars: {} };

async function shellTo(t: TestContext, mode: HostileMode, intervalMs?: number) {
  const envd = await HostileEnvd.start({ mode, intervalMs });
  const shell = new GuestShell(envd.host, "token", { callTimeoutMs: 500 });
  t.after(async () => {
    shell.close();
    await envd.close();
  });
  return { envd, shell };
}

async function waitUntil(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within 2 s: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function isReason(err: Error, reason: string): void {
  assert.ok(err instanceof WarrenError, `a WarrenError, got ${err}`);
  assert.equal(err.reason, reason, err.message);
}

describe("GuestShell against a hostile envd", () => {
  it("a step whose output never ends fails at the step timeout, its output bounded", async (t) => {
    const { envd, shell } = await shellTo(t, "connect-endless");
    const lines: string[] = [];
    const err = await failsWithin(800 + SLACK_MS, undefined, () =>
      shell.run("yes", ROOT, { timeoutMs: 800, onLine: (line) => lines.push(line) }),
    );
    isReason(err, "guest_unavailable");
    assert.match(err.message, /did not finish in 800 ms/);
    assert.ok(envd.bytesSent > 1024 * 1024, "the output was read as it came");
    // One endless line: handed on in pieces of at most 8 KiB (plus the cut mark).
    assert.ok(lines.length > 0 && lines.every((line) => line.length <= 8_193));
    await envd.allClosed();
  });

  it("a step whose output stream claims a 1 GiB message fails at once", async (t) => {
    const { envd, shell } = await shellTo(t, "connect-huge-message");
    const err = await failsWithin(SLACK_MS, undefined, () =>
      shell.run("true", ROOT, { timeoutMs: 60_000 }),
    );
    assert.match(err.message, /larger than configured readMaxBytes/);
    await envd.allClosed();
    assert.ok(envd.bytesSent < 32 * 1024 * 1024, `${envd.bytesSent} bytes sent`);
  });

  it("a step against an envd that never answers fails at the step timeout", async (t) => {
    const { envd, shell } = await shellTo(t, "silent");
    const err = await failsWithin(500 + SLACK_MS, undefined, () =>
      shell.run("true", ROOT, { timeoutMs: 500 }),
    );
    isReason(err, "guest_unavailable");
    await envd.allClosed();
  });

  it("a step in flight ends at once when the build is cancelled", async (t) => {
    const { envd, shell } = await shellTo(t, "connect-endless");
    const cancel = new AbortController();
    setTimeout(() => cancel.abort(new Error("cancelled")), 200);
    await failsWithin(200 + 500, undefined, () =>
      shell.run("yes", ROOT, { timeoutMs: 3_600_000, signal: cancel.signal }),
    );
    await envd.allClosed();
  });

  it("a start command envd never reports started fails at the call timeout", async (t) => {
    const { envd, shell } = await shellTo(t, "silent");
    const err = await failsWithin(500 + SLACK_MS, undefined, () => shell.start("server", ROOT));
    isReason(err, "guest_unavailable");
    assert.match(err.message, /did not report 'server' started within 500 ms/);
    await envd.allClosed();
  });

  it("envd defaults (/init) to a trickling envd fail at the call timeout", async (t) => {
    const { envd, shell } = await shellTo(t, "trickle", 20);
    const err = await failsWithin(500 + SLACK_MS, undefined, () => shell.setDefaults(ROOT));
    isReason(err, "guest_unavailable");
    await envd.allClosed();
  });

  it("envd defaults (/init) answered with huge headers fail at once", async (t) => {
    const { envd, shell } = await shellTo(t, "huge-headers");
    const err = await failsWithin(SLACK_MS, undefined, () => shell.setDefaults(ROOT));
    isReason(err, "guest_reply_invalid");
    await envd.allClosed();
  });

  it("an upload to an envd that never reads it fails at its timeout", async (t) => {
    const { envd, shell } = await shellTo(t, "stalled");
    const archive = new Uint8Array(64 * 1024 * 1024);
    const err = await failsWithin(500 + SLACK_MS, undefined, () =>
      shell.upload("/tmp/a.tar", archive, "root", { timeoutMs: 500 }),
    );
    isReason(err, "guest_unavailable");
    await envd.allClosed();
  });

  it("a streamed COPY archive to an envd that never reads it fails at its timeout and stops reading", async (t) => {
    const { envd, shell } = await shellTo(t, "stalled");
    const dir = await mkdtemp(join(tmpdir(), "warren-hostile-copy-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const tar = join(dir, "big.tar");
    const header = Buffer.alloc(512);
    new Header({ path: "big.bin", type: "File", mode: 0o644, size: 64 * 1024 * 1024 }).encode(
      header,
    );
    await writeFile(tar, header);
    await truncate(tar, 512 + 64 * 1024 * 1024 + 1024);
    const sources: Readable[] = [];
    const archive = await linkSafeArchive(() => {
      const source = createReadStream(tar);
      sources.push(source);
      return source;
    });
    const err = await failsWithin(500 + SLACK_MS, undefined, () =>
      shell.upload("/tmp/a.tar", archive, "root", { timeoutMs: 500 }),
    );
    isReason(err, "guest_unavailable");
    assert.ok(archive.destroyed, "the archive stream was ended");
    await waitUntil(() => sources.every((s) => s.destroyed), "the archive file closed");
    await envd.allClosed();
  });

  it("an upload answered with an endless body is cut at the reply limit", async (t) => {
    const { envd, shell } = await shellTo(t, "endless");
    const err = await failsWithin(SLACK_MS, undefined, () =>
      shell.upload("/tmp/a.tar", new Uint8Array(16), "root", { timeoutMs: 60_000 }),
    );
    isReason(err, "guest_reply_invalid");
    await envd.allClosed();
  });
});
