/**
 * The gVisor peer for `bench:rl`: Docker + gVisor's `runsc` on this same machine, driven through the
 * Engine API so the RL workloads can run on it exactly as they run on Warren.
 *
 * It installs the Debian packages `docker.io` and `runsc` with apt-get if missing (and leaves them).
 * It owns, and `close()` removes again, even after a half-way failure or a ^C:
 * - one private containerd + dockerd pair, whose roots, sockets, pidfile, logs and TMPDIR all live in
 *   a fresh `/var/tmp/warren-peer-XXXX` (never the system docker, its socket or /var/lib/docker);
 * - the cgroups under the parent named like that dir, the shim sockets containerd 1.6 insists on
 *   putting in /run/containerd/s, and the /run/docker/plugins dir dockerd 20.10 hard-codes;
 * - a read-only loop mount of the ext4 root filesystem, only while the image is imported.
 * runsc runs with --overlay2=none so writes reach Docker's layer (`commit` sees them) and with
 * --network=none; checkpoints need experimental dockerd, and restore only keeps processes descended
 * from the container's init (see CreateOptions.background).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { cp, rm } from "node:fs/promises";
import { Agent, type IncomingMessage, request } from "node:http";
import { basename, join } from "node:path";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";

export interface ExecOptions {
  /** Kills the command (in the sandbox, with coreutils `timeout`) after this long; exit code 124. */
  timeoutMs?: number;
  env?: Record<string, string>;
  cwd?: string;
  /** Per stream; output beyond it is dropped (and `truncated` set). Default 8 MiB. */
  maxOutputBytes?: number;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
}

export interface CreateOptions {
  /**
   * A `/bin/sh` command the container's init starts in the background. Only processes descended
   * from init survive checkpoint/restore: runsc 20240729 restores exec'd ones as zombies
   * (google/gvisor#11544), so long-lived servers that must survive `fork` belong here.
   */
  background?: string;
}

export interface GvisorPeerOptions {
  /** ext4 image of the sandbox root filesystem (read only; never modified). */
  rootfsExt4: string;
  log?: (line: string) => void;
  /**
   * gVisor platform; default ptrace. systrap (runsc >= 2023) works too, but on this 2-core,
   * nested (PVM) host it measured no faster; KVM is unusable here.
   */
  platform?: "systrap" | "ptrace";
  /** Run close() on SIGINT/SIGTERM of this process, then die of the signal as usual. Default true. */
  handleSignals?: boolean;
}

export interface GvisorPeer {
  /** The private temp dir holding every daemon's state. */
  readonly dir: string;
  readonly runscVersion: string;
  readonly platform: "systrap" | "ptrace";
  /** The imported root filesystem, as an image reference. */
  readonly image: string;
  readonly timings: { installMs: number; daemonMs: number; importMs: number };
  /** Creates and starts a container idling in `sleep infinity` under runsc, without network. */
  create(image?: string, opts?: CreateOptions): Promise<string>;
  /** Runs `bash -lc cmd` in the container. */
  exec(id: string, cmd: string, opts?: ExecOptions): Promise<ExecResult>;
  /** Snapshots the container's filesystem (not its memory) as `warren-peer:<tag>`; returns the image id. */
  commit(id: string, tag: string): Promise<string>;
  /** Saves the sandbox (memory and processes) as `name` and stops the container. */
  checkpoint(id: string, name: string): Promise<void>;
  /** Starts the container, stopped by `checkpoint`, from checkpoint `name`. */
  restore(id: string, name: string): Promise<void>;
  /**
   * Branches a running container, memory and all: checkpoint + commit as `warren-peer:<tag>`, resume
   * it, and restore the checkpoint into a new container of that image. Returns the new id.
   */
  fork(id: string, tag: string): Promise<string>;
  remove(id: string): Promise<void>;
  /** Removes every container, stops both daemons, unmounts and deletes everything. Idempotent. */
  close(): Promise<void>;
}

const DOCKERD = "/usr/sbin/dockerd";
const CONTAINERD = "/usr/bin/containerd";
const SHIM = "/usr/bin/containerd-shim-runc-v2";
const RUNSC = "/usr/bin/runsc";
const REPO = "warren-peer";
const MAX_JSON_BYTES = 16 << 20;
// Docker's default PATH: `import` gives the image no config, so `sleep` must be found somehow.
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// Shim sockets: containerd 1.6 hard-codes this dir, whatever its configured state dir.
const SHIM_SOCKET_DIR = "/run/containerd/s";
// Plugin sockets: dockerd 20.10 hard-codes this dir, whatever its exec root.
const PLUGIN_DIR = "/run/docker/plugins";

type Log = (line: string) => void;

/** Runs a command to completion; rejects naming it, with the tail of its stderr. */
function run(
  cmd: string,
  args: string[],
  opts: { log?: Log; env?: NodeJS.ProcessEnv } = {},
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      env: opts.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    let partial = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      if (stdout.length < 1 << 20) stdout += chunk;
      if (!opts.log) return;
      const lines = (partial + chunk).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) if (line.trim()) opts.log(`  ${line}`);
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-8192);
    });
    child.on("error", (err) => reject(new Error(`${cmd} ${args.join(" ")}: ${err.message}`)));
    child.on("close", (code, signal) => {
      if (code === 0) resolve({ stdout, stderr });
      else
        reject(
          new Error(
            `${cmd} ${args.join(" ")} failed (${signal ?? `exit ${code}`}): ${stderr.trim().slice(-2000)}`,
          ),
        );
    });
  });
}

/** The candidate version apt-cache reports for a package, or null. */
function aptCandidate(policy: string, pkg: string): string | null {
  const section = policy.split(/^(?=\S)/m).find((s) => s.startsWith(`${pkg}:`)) ?? "";
  const candidate = /Candidate: (\S+)/.exec(section)?.[1];
  return candidate && candidate !== "(none)" ? candidate : null;
}

async function ensurePackages(log: Log): Promise<void> {
  if ([DOCKERD, CONTAINERD, SHIM, RUNSC].every((p) => existsSync(p))) return;
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const policy = (await run("apt-cache", ["policy", "docker.io", "runsc"])).stdout;
  if (
    !aptCandidate(policy, "docker.io") ||
    !aptCandidate(policy, "runsc") ||
    !policy.includes("bookworm-backports")
  ) {
    log("peer: apt-get update");
    await run("apt-get", ["update"], { env });
  }
  // Without a policy-rc.d, docker.io's postinst would start the *system* docker and containerd.
  const policyRc = "/usr/sbin/policy-rc.d";
  const ownPolicy = !existsSync(policyRc);
  if (ownPolicy) writeFileSync(policyRc, "#!/bin/sh\nexit 101\n", { mode: 0o755 });
  try {
    const install = ["install", "-y", "--no-install-recommends"];
    if (!existsSync(DOCKERD) || !existsSync(CONTAINERD) || !existsSync(SHIM)) {
      log("peer: apt-get install docker.io");
      await run("apt-get", [...install, "docker.io"], { env, log });
    }
    if (!existsSync(RUNSC)) {
      try {
        log("peer: apt-get install -t bookworm-backports runsc");
        await run("apt-get", [...install, "-t", "bookworm-backports", "runsc"], { env, log });
      } catch (err) {
        log(
          `peer: backports runsc failed (${(err as Error).message.slice(0, 200)}); using bookworm's`,
        );
        await run("apt-get", [...install, "runsc"], { env, log });
      }
    }
  } finally {
    if (ownPolicy) rmSync(policyRc, { force: true });
  }
}

interface Daemon {
  child: ChildProcess;
  exited: Promise<void>;
}

function startDaemon(cmd: string, args: string[], logFile: string, env: NodeJS.ProcessEnv): Daemon {
  const fd = openSync(logFile, "a");
  // Own process group: a ^C on the caller's terminal must not race close() in stopping it.
  const child = spawn(cmd, args, { detached: true, stdio: ["ignore", fd, fd], env });
  closeSync(fd);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    child.once("exit", () => resolve());
    child.once("error", () => resolve());
  });
  return { child, exited };
}

async function stopDaemon(d: Daemon | undefined, graceMs: number): Promise<void> {
  if (!d || d.child.exitCode !== null || d.child.signalCode !== null) return;
  d.child.kill("SIGTERM");
  const done = await Promise.race([d.exited.then(() => true), sleep(graceMs).then(() => false)]);
  if (!done) {
    d.child.kill("SIGKILL");
    await d.exited;
  }
}

function tail(file: string): string {
  try {
    return readFileSync(file, "utf8").slice(-1500);
  } catch {
    return "";
  }
}

/** PIDs (not ours) whose command line names `dir`: shims, runsc sandboxes and gofers left behind. */
function processesNaming(dir: string, except: (number | undefined)[]): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid || except.includes(pid)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(dir)) pids.push(pid);
    } catch {
      // Exited meanwhile.
    }
  }
  return pids;
}

async function killStragglers(dir: string, except: (number | undefined)[]): Promise<void> {
  for (let round = 0; round < 20; round++) {
    const pids = processesNaming(dir, except);
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    await sleep(100);
  }
}

/** Mount points at or under `dir`, deepest first. */
function mountsUnder(dir: string): string[] {
  const points = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" ")[4] ?? "")
    .map((p) =>
      p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))),
    )
    .filter((p) => p === dir || p.startsWith(`${dir}/`));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

async function unmountUnder(dir: string): Promise<void> {
  for (const point of mountsUnder(dir)) {
    try {
      await run("umount", [point]);
    } catch {
      await run("umount", ["-l", point]).catch(() => undefined);
    }
  }
}

/** Removes the cgroup `name` (children first) in every hierarchy, v1 or v2. */
async function removeCgroups(name: string): Promise<void> {
  const root = "/sys/fs/cgroup";
  let controllers: string[] = [];
  try {
    controllers = readdirSync(root).map((c) => join(root, c, name));
  } catch {
    return;
  }
  const removeTree = (path: string): void => {
    for (const entry of readdirSync(path, { withFileTypes: true }))
      if (entry.isDirectory()) removeTree(join(path, entry.name));
    rmdirSync(path);
  };
  for (const path of [join(root, name), ...controllers]) {
    if (!existsSync(path)) continue;
    // A cgroup stays busy for a moment after its last task exits.
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        removeTree(path);
        break;
      } catch {
        await sleep(100);
      }
    }
  }
}

function rmdirIfEmpty(path: string): void {
  try {
    rmdirSync(path);
  } catch {
    // Not empty (someone else's), or already gone.
  }
}

/** Splits Docker's multiplexed exec stream (8-byte headers: type, 0, 0, 0, big-endian length). */
class Demux {
  readonly out: Buffer[] = [];
  readonly err: Buffer[] = [];
  private outBytes = 0;
  private errBytes = 0;
  private pending: Buffer = Buffer.alloc(0);
  truncated = false;

  constructor(private readonly max: number) {}

  push(chunk: Buffer): void {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    while (this.pending.length >= 8) {
      const type = this.pending[0];
      const length = this.pending.readUInt32BE(4);
      if (type !== 0 && type !== 1 && type !== 2)
        throw new Error(`exec stream: bad frame type ${type}`);
      if (this.pending.length < 8 + length) break;
      const body = this.pending.subarray(8, 8 + length);
      this.pending = this.pending.subarray(8 + length);
      if (type === 1) this.outBytes = this.keep(this.out, this.outBytes, body);
      else if (type === 2) this.errBytes = this.keep(this.err, this.errBytes, body);
    }
  }

  private keep(into: Buffer[], have: number, body: Buffer): number {
    const room = this.max - have;
    if (body.length > room) this.truncated = true;
    if (room > 0) into.push(body.length > room ? Buffer.from(body.subarray(0, room)) : body);
    return have + Math.min(room, body.length);
  }
}

class DockerApi {
  // Keep-alive: a fresh unix connection per call would be measured as the peer's latency.
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 32 });

  constructor(readonly socketPath: string) {}

  /** Sends a request; resolves with the response, whose body the caller must consume. */
  send(
    method: string,
    path: string,
    body?: unknown,
    opts: { stream?: Readable; contentType?: string; timeoutMs?: number } = {},
  ): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const json = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const headers: Record<string, string | number> = {};
      if (json) {
        headers["content-type"] = "application/json";
        headers["content-length"] = json.length;
      } else if (opts.stream) headers["content-type"] = opts.contentType ?? "application/x-tar";
      const req = request({
        socketPath: this.socketPath,
        agent: this.agent,
        method,
        path,
        headers,
      });
      req.on("response", resolve);
      req.on("error", (err) => reject(new Error(`docker ${method} ${path}: ${err.message}`)));
      if (opts.timeoutMs)
        req.setTimeout(opts.timeoutMs, () =>
          req.destroy(new Error(`timed out after ${opts.timeoutMs} ms`)),
        );
      if (opts.stream) {
        opts.stream.on("error", (err) => req.destroy(err));
        opts.stream.pipe(req);
      } else req.end(json);
    });
  }

  /** Sends a request and reads the whole (bounded) body; rejects with the API's status and message. */
  async call(
    method: string,
    path: string,
    body?: unknown,
    opts: { stream?: Readable; timeoutMs?: number; ok?: number[] } = {},
  ): Promise<{ status: number; text: string }> {
    const res = await this.send(method, path, body, opts);
    const text = await readBody(res, MAX_JSON_BYTES, `docker ${method} ${path}`);
    const status = res.statusCode ?? 0;
    if (status >= 400 && !opts.ok?.includes(status)) {
      let message = text.trim();
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? message;
      } catch {
        // Not JSON: keep the raw text.
      }
      throw new Error(`docker ${method} ${path}: ${status} ${message}`);
    }
    return { status, text };
  }

  async json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const { text } = await this.call(method, path, body);
    return JSON.parse(text) as T;
  }

  close(): void {
    this.agent.destroy();
  }
}

function readBody(res: IncomingMessage, max: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) res.destroy(new Error(`${what}: response over ${max} bytes`));
      else chunks.push(chunk);
    });
    res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    res.on("error", reject);
  });
}

/** Whether `dockerd` answers `/_ping` on its socket. */
async function pinged(api: DockerApi): Promise<boolean> {
  try {
    const { status, text } = await api.call("GET", "/_ping", undefined, { timeoutMs: 1000 });
    return status === 200 && text === "OK";
  } catch {
    return false;
  }
}

/** Streams the ext4 image's files, mounted read-only, into `repo:tag`; returns the image id. */
async function importRootfs(
  api: DockerApi,
  ext4: string,
  dir: string,
  log: Log,
  held: { loop?: string },
): Promise<string> {
  const mnt = join(dir, "rootfs");
  mkdirSync(mnt);
  // Our own read-only loop device: we detach exactly it, and nothing can write to the image.
  const loop = (await run("losetup", ["--find", "--show", "--read-only", ext4])).stdout.trim();
  // Published so a close() racing this import (a ^C) can detach it too.
  held.loop = loop;
  let mounted = false;
  try {
    // noload: never replay the journal, which a read-only device could not take anyway.
    await run("mount", ["-t", "ext4", "-o", "ro,noload", loop, mnt]);
    mounted = true;
    log(`peer: importing ${ext4} (via ${loop}) as ${REPO}:base`);
    const tar = spawn("tar", ["-C", mnt, "--numeric-owner", "-c", "."], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let tarErr = "";
    tar.stderr.setEncoding("utf8").on("data", (c: string) => {
      tarErr = (tarErr + c).slice(-2000);
    });
    const tarDone = new Promise<number | null>((resolve) => tar.on("close", resolve));
    const changes = encodeURIComponent(`ENV PATH=${PATH}`);
    const { text } = await api.call(
      "POST",
      `/images/create?fromSrc=-&repo=${REPO}&tag=base&changes=${changes}`,
      undefined,
      { stream: tar.stdout },
    );
    const code = await tarDone;
    if (code !== 0) throw new Error(`tar -C ${mnt} -c . failed (exit ${code}): ${tarErr.trim()}`);
    // The body is a stream of JSON messages; failures arrive as {"error": ...} with status 200.
    let id = "";
    for (const line of text.split(/\r?\n/)) {
      if (!line.trim()) continue;
      const msg = JSON.parse(line) as { status?: string; error?: string };
      if (msg.error) throw new Error(`docker POST /images/create: ${msg.error}`);
      if (msg.status?.startsWith("sha256:")) id = msg.status;
    }
    if (!id) throw new Error(`docker POST /images/create: no image id in ${text.slice(0, 500)}`);
    return id;
  } finally {
    if (mounted) await run("umount", [mnt]).catch(() => run("umount", ["-l", mnt]));
    await run("losetup", ["-d", loop]).catch(() => undefined);
    held.loop = undefined;
    rmdirIfEmpty(mnt);
  }
}

interface RunscInfo {
  version: string;
  systrap: boolean;
  overlay2: boolean;
}

async function runscInfo(): Promise<RunscInfo> {
  const version = (await run(RUNSC, ["--version"])).stdout.split("\n")[0] ?? "";
  // `runsc flags` prints to stderr; `run` keeps its tail only, so capture directly.
  const flags = await new Promise<string>((resolve) => {
    const child = spawn(RUNSC, ["flags"], { stdio: ["ignore", "pipe", "pipe"] });
    let text = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => {
      text += c;
    });
    child.stderr.setEncoding("utf8").on("data", (c: string) => {
      text += c;
    });
    child.on("close", () => resolve(text));
    child.on("error", () => resolve(text));
  });
  return { version, systrap: flags.includes("systrap"), overlay2: flags.includes("-overlay2") };
}

export async function startGvisorPeer(opts: GvisorPeerOptions): Promise<GvisorPeer> {
  const log = opts.log ?? (() => undefined);
  const t0 = performance.now();
  await ensurePackages(log);
  const installMs = performance.now() - t0;
  // Fail before starting anything if the image is missing.
  if (!existsSync(opts.rootfsExt4)) throw new Error(`rootfs image ${opts.rootfsExt4} not found`);
  const runsc = await runscInfo();
  const platform = opts.platform ?? "ptrace";
  if (platform === "systrap" && !runsc.systrap)
    throw new Error(`runsc (${runsc.version}) has no systrap platform`);

  // Short path: unix socket paths (shims, runsc) must stay under 108 bytes.
  const dir = mkdtempSync("/var/tmp/warren-peer-");
  const name = basename(dir);
  const ctdSock = join(dir, "containerd.sock");
  const ctdState = join(dir, "containerd-state");
  const dockerSock = join(dir, "docker.sock");
  const tmp = join(dir, "tmp");
  mkdirSync(tmp);
  // Only dirs we create ourselves are ours to rmdir in close().
  const createdRunDirs = [SHIM_SOCKET_DIR, "/run/containerd", PLUGIN_DIR, "/run/docker"].filter(
    (p) => !existsSync(p),
  );
  const made = new Set<string>();
  const held: { loop?: string } = {};
  const api = new DockerApi(dockerSock);
  let containerd: Daemon | undefined;
  let dockerd: Daemon | undefined;
  let closing: Promise<void> | undefined;

  const close = (): Promise<void> => {
    closing ??= (async () => {
      const errors: string[] = [];
      const attempt = async (what: string, fn: () => Promise<void> | void): Promise<void> => {
        const start = performance.now();
        try {
          await fn();
        } catch (err) {
          errors.push(`${what}: ${(err as Error).message}`);
        }
        const took = performance.now() - start;
        if (took > 500) log(`peer: close: ${what} took ${(took / 1000).toFixed(1)} s`);
      };
      if (dockerd && dockerd.child.exitCode === null && dockerd.child.signalCode === null) {
        for (const id of made)
          await attempt(`remove ${id.slice(0, 12)}`, () =>
            api
              .call("DELETE", `/containers/${id}?force=1&v=1`, undefined, {
                ok: [404],
                timeoutMs: 30_000,
              })
              .then(() => undefined),
          );
      }
      api.close();
      await attempt("stop dockerd", () => stopDaemon(dockerd, 20_000));
      // Shims and sandboxes of containers whose removal failed: they name our dir on their command lines.
      await attempt("kill stragglers", () => killStragglers(dir, [containerd?.child.pid]));
      // The shim sockets containerd put outside our dir: named by a hash of our address and the ids.
      await attempt("remove shim sockets", () => {
        const ids = new Set(made);
        const tasks = join(ctdState, "io.containerd.runtime.v2.task", "moby");
        if (existsSync(tasks)) for (const id of readdirSync(tasks)) ids.add(id);
        for (const id of ids) {
          const hash = createHash("sha256")
            .update(join(ctdSock, "moby", id))
            .digest("hex");
          rmSync(join(SHIM_SOCKET_DIR, hash), { force: true });
        }
      });
      await attempt("stop containerd", () => stopDaemon(containerd, 10_000));
      await attempt("kill stragglers", () => killStragglers(dir, []));
      await attempt("unmount", () => unmountUnder(dir));
      if (held.loop) {
        const loop = held.loop;
        await attempt(`detach ${loop}`, () => run("losetup", ["-d", loop]).then(() => undefined));
      }
      await attempt("remove cgroups", () => removeCgroups(name));
      for (const p of createdRunDirs) rmdirIfEmpty(p);
      await attempt("remove dir", () => {
        const left = mountsUnder(dir);
        // Never recurse into a mount (it could be someone's files): leave the dir and say so.
        if (left.length) throw new Error(`still mounted: ${left.join(", ")}`);
        return rm(dir, { recursive: true, force: true });
      });
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      if (errors.length) throw new Error(`gVisor peer close: ${errors.join("; ")}`);
      log(`peer: closed, removed ${dir}`);
    })();
    return closing;
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    log(`peer: ${signal}, cleaning up`);
    void close()
      .catch((err: Error) => log(err.message))
      .finally(() => process.kill(process.pid, signal));
  };
  if (opts.handleSignals ?? true) {
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
  }

  try {
    const t1 = performance.now();
    // TMPDIR: containerd 1.6 otherwise leaves its ctrd-checkpoint* dirs in /tmp.
    const env = { ...process.env, TMPDIR: tmp, PATH };
    const ctdConfig = join(dir, "containerd.toml");
    writeFileSync(
      ctdConfig,
      [
        "version = 2",
        `root = "${join(dir, "containerd-root")}"`,
        `state = "${ctdState}"`,
        // Docker needs none of Kubernetes' CRI.
        `disabled_plugins = ["io.containerd.grpc.v1.cri"]`,
        "[grpc]",
        `  address = "${ctdSock}"`,
        "[ttrpc]",
        `  address = ""`,
        "[debug]",
        `  address = ""`,
        "[metrics]",
        `  address = ""`,
        // Collect a deleted checkpoint's blobs at once: restore re-uploads them and fails on "already exists".
        `[plugins."io.containerd.gc.v1.scheduler"]`,
        "  deletion_threshold = 1",
        `  schedule_delay = "0s"`,
        `[plugins."io.containerd.internal.v1.opt"]`,
        `  path = "${join(dir, "containerd-opt")}"`,
        "",
      ].join("\n"),
    );
    // Our own containerd, so dockerd can never attach to a system one at /run/containerd.
    containerd = startDaemon(CONTAINERD, ["--config", ctdConfig], join(dir, "containerd.log"), env);
    for (let i = 0; !existsSync(ctdSock); i++) {
      if (containerd.child.exitCode !== null || i > 300)
        throw new Error(`containerd did not start: ${tail(join(dir, "containerd.log"))}`);
      await sleep(50);
    }

    const runtimeArgs = [
      `--platform=${platform}`,
      // No network wanted; and runsc refuses its netstack when Docker's "none" netns looks like the host's.
      "--network=none",
    ];
    // runsc's default root:self overlay keeps writes inside the sandbox, invisible to `docker commit`.
    if (runsc.overlay2) runtimeArgs.push("--overlay2=none");
    const daemonConfig = join(dir, "daemon.json");
    writeFileSync(
      daemonConfig,
      JSON.stringify({
        runtimes: { runsc: { path: RUNSC, runtimeArgs } },
        "default-runtime": "runsc",
        "cgroup-parent": name,
        // Else dockerd 20.10 writes /etc/docker/key.json.
        "deprecated-key-path": join(dir, "key.json"),
        // `docker checkpoint` is experimental in 20.10.
        experimental: true,
        "log-driver": "none",
        "storage-driver": "overlay2",
      }),
    );
    dockerd = startDaemon(
      DOCKERD,
      [
        `--config-file=${daemonConfig}`,
        `--containerd=${ctdSock}`,
        `--data-root=${join(dir, "docker")}`,
        `--exec-root=${join(dir, "exec")}`,
        `--pidfile=${join(dir, "dockerd.pid")}`,
        `--host=unix://${dockerSock}`,
        "--bridge=none",
        "--iptables=false",
        "--ip-masq=false",
      ],
      join(dir, "dockerd.log"),
      env,
    );
    for (let i = 0; !(await pinged(api)); i++) {
      if (dockerd.child.exitCode !== null || i > 300)
        throw new Error(`dockerd did not answer /_ping: ${tail(join(dir, "dockerd.log"))}`);
      await sleep(100);
    }
    const daemonMs = performance.now() - t1;
    log(`peer: dockerd up in ${dir} (${runsc.version}, platform ${platform})`);

    const t2 = performance.now();
    await importRootfs(api, opts.rootfsExt4, dir, log, held);
    const importMs = performance.now() - t2;
    log(`peer: image imported in ${(importMs / 1000).toFixed(1)} s`);

    const createStopped = async (image: string, background?: string): Promise<string> => {
      // No host stdio inside the sandbox: runsc cannot restore a checkpoint holding host FDs.
      const quiet = "</dev/null >/dev/null 2>&1";
      const init = `${background ? `(${background}) ${quiet} & ` : ""}exec sleep infinity ${quiet}`;
      const { Id } = await api.json<{ Id: string }>("POST", "/containers/create", {
        Image: image,
        Cmd: ["/bin/sh", "-c", init],
        Labels: { "warren-peer": name },
        HostConfig: { Runtime: "runsc", NetworkMode: "none" },
      });
      made.add(Id);
      return Id;
    };

    const start = async (id: string, checkpoint?: string): Promise<void> => {
      const path = `/containers/${id}/start${checkpoint ? `?checkpoint=${encodeURIComponent(checkpoint)}` : ""}`;
      // Docker 20.10 re-uploads a checkpoint into containerd's content store, and fails if the blobs
      // from creating it are not yet garbage-collected: retry while they are.
      for (let attempt = 0; ; attempt++) {
        try {
          await api.call("POST", path);
          return;
        } catch (err) {
          if (checkpoint && attempt < 50 && /already exists/.test((err as Error).message)) {
            await sleep(50);
            continue;
          }
          // A failed start can leave runsc's sandbox and gofer running: take them down now.
          if (!checkpoint) await remove(id).catch(() => undefined);
          throw err;
        }
      }
    };

    const create = async (image = `${REPO}:base`, o: CreateOptions = {}): Promise<string> => {
      const id = await createStopped(image, o.background);
      await start(id);
      return id;
    };

    const exec = async (id: string, cmd: string, o: ExecOptions = {}): Promise<ExecResult> => {
      const secs = o.timeoutMs ? Math.max(1, Math.ceil(o.timeoutMs / 1000)) : 0;
      const argv = ["bash", "-lc", cmd];
      const { Id: execId } = await api.json<{ Id: string }>("POST", `/containers/${id}/exec`, {
        Cmd: secs ? ["timeout", "-k", "2", String(secs), ...argv] : argv,
        AttachStdout: true,
        AttachStderr: true,
        Env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
        WorkingDir: o.cwd ?? "",
      });
      // Backstop in case the sandbox cannot even run `timeout`.
      const started = performance.now();
      const guardMs = o.timeoutMs ? o.timeoutMs + 10_000 : undefined;
      const res = await api.send(
        "POST",
        `/exec/${execId}/start`,
        { Detach: false, Tty: false },
        { timeoutMs: guardMs },
      );
      if ((res.statusCode ?? 0) >= 400) {
        const text = await readBody(res, MAX_JSON_BYTES, "exec start");
        throw new Error(`docker POST /exec/${execId}/start: ${res.statusCode} ${text.trim()}`);
      }
      const demux = new Demux(o.maxOutputBytes ?? 8 << 20);
      await new Promise<void>((resolve, reject) => {
        res.on("data", (chunk: Buffer) => {
          try {
            demux.push(chunk);
          } catch (err) {
            res.destroy(err as Error);
          }
        });
        res.on("end", resolve);
        res.on("error", reject);
        res.on("close", resolve);
      });
      // The stream can close a moment before Docker records the exit code.
      let exitCode: number | null = null;
      for (let i = 0; exitCode === null; i++) {
        const info = await api.json<{ Running: boolean; ExitCode: number | null }>(
          "GET",
          `/exec/${execId}/json`,
        );
        if (!info.Running && info.ExitCode !== null) exitCode = info.ExitCode;
        else if (i > 200) throw new Error(`exec ${execId}: no exit code after its output ended`);
        else await sleep(5);
      }
      return {
        exitCode,
        stdout: Buffer.concat(demux.out).toString("utf8"),
        stderr: Buffer.concat(demux.err).toString("utf8"),
        // 124: `timeout` sent TERM; 137: it had to KILL.
        timedOut:
          secs > 0 &&
          (exitCode === 124 || exitCode === 137) &&
          performance.now() - started >= secs * 1000,
        truncated: demux.truncated,
      };
    };

    const commit = async (id: string, tag: string): Promise<string> => {
      const q = new URLSearchParams({ container: id, repo: REPO, tag, pause: "true" });
      const { Id } = await api.json<{ Id: string }>("POST", `/commit?${q}`, {});
      return Id;
    };

    const checkpoint = async (id: string, cpName: string): Promise<void> => {
      await api.call("POST", `/containers/${id}/checkpoints`, { CheckpointID: cpName, Exit: true });
    };

    const restore = (id: string, cpName: string): Promise<void> => start(id, cpName);

    const fork = async (id: string, tag: string): Promise<string> => {
      // Checkpoint and commit while the source is stopped, so memory and files agree.
      await checkpoint(id, tag);
      try {
        await commit(id, tag);
      } finally {
        await restore(id, tag);
      }
      const child = await createStopped(`${REPO}:${tag}`);
      // Docker 20.10 refuses a custom checkpoint dir ("not supported"): put a copy in the child's own.
      const checkpoints = (c: string) => join(dir, "docker", "containers", c, "checkpoints", tag);
      await cp(checkpoints(id), checkpoints(child), { recursive: true });
      await restore(child, tag);
      return child;
    };

    const remove = async (id: string): Promise<void> => {
      await api.call("DELETE", `/containers/${id}?force=1&v=1`);
      made.delete(id);
    };

    return {
      dir,
      runscVersion: runsc.version,
      platform,
      image: `${REPO}:base`,
      timings: { installMs, daemonMs, importMs },
      create,
      exec,
      commit,
      checkpoint,
      restore,
      fork,
      remove,
      close,
    };
  } catch (err) {
    await close().catch((closeErr: Error) => log(closeErr.message));
    throw err;
  }
}
