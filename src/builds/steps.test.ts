// Build steps (steps.ts): the COPY script run by the host's busybox sh on a directory of its
// own, as the build VM runs it (Docker's COPY semantics, including E2B's `copy('folder/*.txt',
// 'folder')` into a directory that already exists, which failed with "mv: can't create");
// a RUN envd refuses to start (a user the image lacks) fails in E2B's words.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, beforeEach, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import type { GuestShell } from "./guest-shell.js";
import { COPY_SCRIPT, runStep, StepFailed } from "./steps.js";

const BUSYBOX = "/bin/busybox";
const hasBusybox = existsSync(BUSYBOX);

describe("COPY step script", {
  skip: !hasBusybox && "busybox is not installed (apt-get install busybox-static)",
}, () => {
  const base = mkdtempSync(join(tmpdir(), "warren-copy-step-"));
  const files = join(base, "files");
  const guest = join(base, "guest");
  const script = COPY_SCRIPT.replaceAll("/.warren/bin/busybox", BUSYBOX);

  beforeEach(() => {
    for (const dir of [files, guest]) {
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
    }
    mkdirSync(join(files, "folder", "sub"), { recursive: true });
    writeFileSync(join(files, "folder", "test.txt"), "test\n");
    writeFileSync(join(files, "folder", "other.txt"), "other\n");
    writeFileSync(join(files, "folder", "sub", "deep.txt"), "deep\n");
    symlinkSync("test.txt", join(files, "folder", "link.txt"));
  });

  after(() => rmSync(base, { recursive: true, force: true }));

  /** Runs COPY `src` `dest` (dest inside the guest dir) as root; the script's stderr on failure. */
  function copy(src: string, dest: string): { status: number | null; stderr: string } {
    const archive = join(base, `upload-${Math.random().toString(36).slice(2)}.tar`);
    execFileSync(BUSYBOX, ["tar", "-cf", archive, "-C", files, "."]);
    const run = spawnSync(BUSYBOX, ["sh", "-c", script, "copy", archive, src, dest, "root", ""], {
      encoding: "utf8",
    });
    return { status: run.status, stderr: run.stderr };
  }

  const at = (...parts: string[]) => join(guest, ...parts);

  it("merges a glob's files into a directory that exists, links kept", () => {
    mkdirSync(at("folder"));
    writeFileSync(at("folder", "kept"), "kept\n");
    assert.deepEqual(copy("folder/*.txt", at("folder")), { status: 0, stderr: "" });
    assert.deepEqual(readdirSync(at("folder")).sort(), [
      "kept",
      "link.txt",
      "other.txt",
      "test.txt",
    ]);
    assert.equal(readFileSync(at("folder", "test.txt"), "utf8"), "test\n");
    assert.ok(lstatSync(at("folder", "link.txt")).isSymbolicLink());
    assert.equal(readlinkSync(at("folder", "link.txt")), "test.txt");
  });

  it("makes the directory for a glob of several files when it does not exist", () => {
    assert.equal(copy("folder/*.txt", at("made")).status, 0);
    assert.deepEqual(readdirSync(at("made")).sort(), ["link.txt", "other.txt", "test.txt"]);
  });

  it("copies one file to a new name, or into a directory", () => {
    assert.equal(copy("folder/test.txt", at("renamed.txt")).status, 0);
    assert.equal(readFileSync(at("renamed.txt"), "utf8"), "test\n");
    mkdirSync(at("dir"));
    assert.equal(copy("folder/test.txt", at("dir")).status, 0);
    assert.equal(readFileSync(at("dir", "test.txt"), "utf8"), "test\n");
    assert.equal(copy("folder/other.txt", `${at("slash")}/`).status, 0);
    assert.equal(readFileSync(at("slash", "other.txt"), "utf8"), "other\n");
  });

  it("merges a directory's contents, again and again", () => {
    assert.equal(copy("folder", at("app")).status, 0);
    assert.equal(copy("folder", at("app")).status, 0);
    assert.equal(readFileSync(at("app", "sub", "deep.txt"), "utf8"), "deep\n");
    assert.deepEqual(readdirSync(at("app")).sort(), ["link.txt", "other.txt", "sub", "test.txt"]);
  });

  it("says what is missing", () => {
    const missing = copy("nope/*", at("x"));
    assert.notEqual(missing.status, 0);
    assert.match(missing.stderr, /'nope\/\*' is not in the uploaded files/);
  });
});

it("fails a RUN as a user the image lacks in E2B's words", async () => {
  const shell = {
    run: async () => {
      throw new ConnectError("invalid username: 'root123'", Code.Unauthenticated);
    },
  } as unknown as GuestShell;
  const failed = await runStep(
    { type: "RUN", command: "whoami", user: "root123" },
    { user: "user", envVars: {} },
    {
      shell,
      files: () => {
        throw new Error("no files");
      },
      onLine: () => {},
      signal: new AbortController().signal,
      timeoutMs: 1000,
    },
  ).catch((err: unknown) => err);
  assert.ok(failed instanceof StepFailed);
  assert.equal(
    failed.message,
    "failed to run command 'whoami': command failed: unauthenticated: invalid username: 'root123'",
  );
});
