// An older commit of Warren, built and served beside HEAD for bench/old-vs-head.ts: checked
// out into a temporary git worktree, its locked dependencies installed and built the way
// its own scripts build it, its guest images built by its own host setup into a cache of
// their own (its recipes may differ from HEAD's: sharing HEAD's would rebuild HEAD's images
// under the other tests), and its server started in a network namespace and a mount
// namespace of its own. Trees before the run sandbox (WARREN_NETWORK_PREFIX, image dirs,
// VMM uid ranges) name their slots `warren-<n>`/`wv<n>`, carve 10.201.0.0/16, sweep every
// such name at start and create the `warren-vmm` account: in the namespaces, all of that
// stays theirs, and the account is a line of a private /etc/passwd, never the host's.
import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { NetnsHost } from "../../test/helpers/netns-host.js";
import { runEnv, runVmmUidBase } from "../../test/helpers/run-env.js";
import { startServer, type TestServer } from "../../test/helpers/server.js";

const WRAPPER = join(import.meta.dirname, "..", "..", "test", "helpers", "in-netns.sh");
/** Old trees' guest images, one cache per commit, beside the test images (kept across runs). */
const OLD_IMAGES_PARENT = "/var/cache/warren-test";
/** The account old trees run QEMU as (their images/vmm-user.ts). */
const OLD_VMM_USER = "warren-vmm";

export interface OldTree {
  readonly dir: string;
  readonly commit: string;
  /** What preparing it cost (npm ci and build), ms; 0 when a prepared tree was reused. */
  readonly buildMs: number;
  /** Removes the worktree (not one handed over with BENCH_OLD_TREE). */
  remove(): void;
}

/**
 * Trees written for Debian's QEMU 7.2 drop root with `-runas`, which QEMU 10 (the host's,
 * since d67b80c) no longer has: `-run-with user=` is the same drop. The one edit an old tree
 * gets; true when it made it (the tree must then be built again).
 */
function qemu10Compat(dir: string): boolean {
  const file = join(dir, "src", "vmm", "qemu", "args.ts");
  const text = readFileSync(file, "utf8");
  const patched = text.replace(
    'args.push("-runas", input.runAs)',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: source text written into the old tree
    'args.push("-run-with", `user=${input.runAs}`)',
  );
  if (patched === text) return false;
  writeFileSync(file, patched);
  return true;
}

function run(cmd: string, args: readonly string[], cwd: string, env = process.env): string {
  const result = spawnSync(cmd, args, {
    cwd,
    env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  if (result.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd} (${result.status})`);
  return result.stdout.trim();
}

/**
 * `ref` checked out (detached) in a temporary worktree of `repo`, `npm ci` and its own
 * scripts/build.mjs run in it. BENCH_OLD_TREE names a tree prepared already (kept).
 */
export async function prepareOldTree(repo: string, ref: string): Promise<OldTree> {
  const given = process.env.BENCH_OLD_TREE;
  if (given) {
    const commit = run("git", ["rev-parse", "HEAD"], given);
    if (qemu10Compat(given)) run(process.execPath, [join(given, "scripts", "build.mjs")], given);
    return { dir: given, commit, buildMs: 0, remove() {} };
  }
  const commit = run("git", ["rev-parse", "--verify", `${ref}^{commit}`], repo);
  // On disk, not a tmpfs: node_modules and the bundles are a few hundred MB.
  const dir = await mkdtemp("/var/tmp/warren-old-tree-");
  const t = performance.now();
  run("git", ["worktree", "add", "--detach", dir, commit], repo);
  const remove = () => {
    spawnSync("git", ["worktree", "remove", "--force", dir], { cwd: repo, stdio: "ignore" });
  };
  try {
    // As scripts/ensure-deps.mjs does: native addons against the running Node's headers.
    const prefix = dirname(dirname(process.execPath));
    const env = existsSync(join(prefix, "include", "node", "node_api.h"))
      ? { ...process.env, npm_config_nodedir: prefix }
      : process.env;
    qemu10Compat(dir);
    run("npm", ["ci", "--no-audit", "--no-fund"], dir, env);
    run(process.execPath, [join(dir, "scripts", "build.mjs")], dir);
  } catch (err) {
    remove();
    throw err;
  }
  return { dir, commit, buildMs: Math.round(performance.now() - t), remove };
}

/**
 * The old tree's guest images, by its own scripts/setup.mjs, in a cache for its commit
 * (`<cache>/images`, the layout trees of that age use under a data dir). The first time,
 * the kernel package and the debootstrap tarball are copied from HEAD's test images when
 * there, then its setup builds what its recipes want. Returns the images dir and the ms taken.
 */
export function oldImages(tree: OldTree): { imagesDir: string; setupMs: number } {
  const cache = join(OLD_IMAGES_PARENT, `old-${tree.commit.slice(0, 12)}`);
  const imagesDir = join(cache, "images");
  const seed = join(runEnv().imagesDir, "cache");
  mkdirSync(join(imagesDir, "cache"), { recursive: true, mode: 0o755 });
  if (existsSync(seed)) {
    for (const name of readdirSync(seed)) {
      if (!/^(linux-image-.*\.deb|debootstrap-.*\.tar\.zst)$/.test(name)) continue;
      const to = join(imagesDir, "cache", name);
      if (!existsSync(to)) copyFileSync(join(seed, name), to);
    }
  }
  const t = performance.now();
  run(process.execPath, [join(tree.dir, "scripts", "setup.mjs"), "--data-dir", cache], tree.dir);
  return { imagesDir, setupMs: Math.round(performance.now() - t) };
}

/**
 * A copy of the host's /etc/passwd and /etc/group with the old tree's VMM account added
 * (a uid of this run's own range), bound over the real ones inside the server's mount
 * namespace: the old server finds its account and never runs useradd on the host.
 */
function accountFiles(dir: string): { passwd: string; group: string } {
  const uid = runVmmUidBase() + 1;
  const passwd = join(dir, "passwd");
  const group = join(dir, "group");
  const host = (file: string) =>
    readFileSync(file, "utf8")
      .split("\n")
      .filter((l) => l !== "" && !l.startsWith(`${OLD_VMM_USER}:`));
  writeFileSync(
    passwd,
    `${[...host("/etc/passwd"), `${OLD_VMM_USER}:x:${uid}:${uid}::/nonexistent:/usr/sbin/nologin`].join("\n")}\n`,
  );
  writeFileSync(group, `${[...host("/etc/group"), `${OLD_VMM_USER}:x:${uid}:`].join("\n")}\n`);
  return { passwd, group };
}

/**
 * The old tree's node server in `host` (a network namespace of the run's, reached at its
 * address): its data dir `home` (made here, images linked to `imagesDir`), `env` added.
 * Old servers log each request's `api.request` at debug: asked for, for its duration.
 */
export async function startOldServer(
  tree: OldTree,
  host: NetnsHost,
  home: string,
  imagesDir: string,
  env: Record<string, string>,
): Promise<TestServer> {
  mkdirSync(home, { recursive: true, mode: 0o711 });
  if (!existsSync(join(home, "images"))) symlinkSync(imagesDir, join(home, "images"));
  const files = accountFiles(home);
  const stash = join(runEnv().dataDir, `${host.netns}-cgroup`);
  const bind =
    'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@"';
  return startServer(
    {
      WARREN_HOME: home,
      WARREN_HOST: host.address,
      WARREN_LOG_LEVEL: "debug",
      // Read by the test helper only (old trees have no admin token).
      WARREN_ADMIN_TOKEN: "none",
      ...env,
    },
    {
      wrap: [WRAPPER, host.netns, stash, "sh", "-c", bind, "sh", files.passwd, files.group],
      entry: [
        process.execPath,
        "--enable-source-maps",
        join(tree.dir, "dist", "server", "main.mjs"),
      ],
      sdkEnv: false,
    },
  );
}
