import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { execCandidates, VforkedChild, type VforkOptions } from "./spawn.js";

const ROOT = process.getuid?.() === 0;
const base: VforkOptions = {
  cwd: "/",
  env: { PATH: "/usr/bin:/bin" },
  uid: process.getuid?.() ?? 0,
  gid: process.getgid?.() ?? 0,
  stdin: false,
};

interface Ran {
  stdout: string;
  stderr: string;
  code: number | null;
  signal: number | null;
}

function run(file: string, args: string[], options: Partial<VforkOptions> = {}, input?: string) {
  const child = new VforkedChild(file, args, { ...base, ...options });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on("data", (data: Buffer) => out.push(data));
  child.stderr.on("data", (data: Buffer) => err.push(data));
  if (input !== undefined) child.stdin?.end(input);
  return new Promise<Ran>((resolve) => {
    let ended: [number | null, number | null] = [null, null];
    child.on("exit", (code, signal) => {
      ended = [code, signal];
    });
    child.on("close", () =>
      resolve({
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
        code: ended[0],
        signal: ended[1],
      }),
    );
  });
}

/** Children of this process that are still in the process table (zombies included). */
function childPids(): string[] {
  const path = `/proc/${process.pid}/task/${process.pid}/children`;
  return readFileSync(path, "utf8").trim().split(/\s+/).filter(Boolean);
}

describe("spawn addon (vfork + execve)", () => {
  it("reports output, exit code and a killing signal", async () => {
    const ran = await run("/bin/sh", ["-c", "echo out; echo err >&2; exit 3"]);
    assert.deepEqual(ran, { stdout: "out\n", stderr: "err\n", code: 3, signal: null });
    const killed = await run("/bin/sh", ["-c", "kill -TERM $$"]);
    assert.deepEqual([killed.code, killed.signal], [null, 15]);
  });

  it("searches the child's PATH, not envd's, and passes argv[0] and env as given", async () => {
    assert.deepEqual(execCandidates("sh", { PATH: "/nowhere:/bin" }), ["/nowhere/sh", "/bin/sh"]);
    assert.deepEqual(execCandidates("./x", { PATH: "/bin" }), ["./x"]);
    const ran = await run("sh", ["-c", 'echo "$0 $FOO"'], {
      env: { PATH: "/nowhere:/bin", FOO: "bar baz" },
    });
    assert.equal(ran.stdout, "sh bar baz\n");
  });

  it("passes stdin through a pipe, and /dev/null without one", async () => {
    assert.equal((await run("/bin/cat", [], { stdin: true }, "piped\n")).stdout, "piped\n");
    assert.equal((await run("/bin/cat", [])).stdout, "");
  });

  it("gives the child default signal dispositions, an empty mask and no envd descriptors", async () => {
    // Node ignores SIGPIPE; a command must not inherit that (`yes | head` would never end).
    const ran = await run("/bin/sh", [
      "-c",
      "grep -E '^Sig(Ign|Blk)' /proc/self/status; ls /proc/self/fd",
    ]);
    assert.match(ran.stdout, /^SigBlk:\s+0+$/m);
    assert.match(ran.stdout, /^SigIgn:\s+0+$/m);
    const fds = ran.stdout.split("\n").filter((line) => /^\d+$/.test(line));
    // 0-2 and the directory ls reads.
    assert.ok(fds.length <= 4, `child holds ${fds.join(",")}`);
  });

  it("refuses what cannot start with the errno, leaving no child and no descriptor", async () => {
    const before = readdirSync("/proc/self/fd").length;
    assert.throws(
      () => new VforkedChild("no-such-command", [], base),
      (err: NodeJS.ErrnoException) => err.code === "ENOENT",
    );
    assert.throws(
      () => new VforkedChild("/bin/true", [], { ...base, cwd: "/no/such/dir" }),
      (err: NodeJS.ErrnoException) => err.code === "ENOENT",
    );
    assert.throws(
      () => new VforkedChild("/etc/passwd", [], base),
      (err: NodeJS.ErrnoException) => err.code === "EACCES",
    );
    assert.equal(readdirSync("/proc/self/fd").length, before);
    assert.deepEqual(childPids(), []);
  });

  it("runs as the given user with no supplementary groups", {
    skip: !ROOT && "needs root to change user (the unit tier runs as root on CI)",
  }, async () => {
    const ran = await run("/bin/sh", ["-c", "id -u; id -g; id -G; pwd"], {
      uid: 65534,
      gid: 65534,
      cwd: "/tmp",
    });
    assert.equal(ran.stdout, "65534\n65534\n65534\n/tmp\n");
  });
});
