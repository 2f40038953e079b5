// Templates from OCI images, as an offline host builds them: a real registry (Debian's
// docker-registry on loopback) holding images this test assembles and pushes with skopeo,
// reached through WARREN_REGISTRY_MIRRORS (docker.io → the registry, plain HTTP allowed by
// WARREN_INSECURE_REGISTRIES). A Debian-based (glibc) and an Alpine-like (musl, busybox)
// image are booted with Warren's agent drive and init, built on with the real SDK builder,
// and restored as sandboxes. Alpine's own packages are not reachable from the test hosts:
// the Alpine-like image is Debian's musl and busybox-static.
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { gzipSync } from "node:zlib";
import { BuildError, type LogEntry, Sandbox, Template, waitForFile } from "e2b";
import { leakCheck, vmLeftovers } from "../helpers/leak-check.js";
import {
  diffId,
  host,
  requireRegistryTools,
  startRegistry,
  type TestRegistry,
  writeOciLayout,
} from "../helpers/registry.js";
import { commandOutput, startServer, type TestServer } from "../helpers/server.js";

const GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
const ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd";
/** A working Debian userland: bash, coreutils and what they link, dash as /bin/sh. */
const DEBIAN_PACKAGES = [
  "base-files",
  "base-passwd",
  "bash",
  "coreutils",
  "dash",
  "debianutils",
  "gcc-12-base",
  "libacl1",
  "libattr1",
  "libc6",
  "libgcc-s1",
  "libgmp10",
  "libpcre2-8-0",
  "libselinux1",
  "libtinfo6",
];

let work: string;
let registry: TestRegistry;
let server: TestServer;

const tarOf = (dir: string) =>
  host("tar", ["--numeric-owner", "--sort=name", "-C", dir, "-cf", "-", "."]);

async function unpackDebs(root: string, packages: readonly string[]): Promise<void> {
  const debs = await mkdtemp(join(work, "debs-"));
  await host("apt-get", ["download", "-q", ...packages], debs);
  for (const deb of await readdir(debs)) {
    if (deb.endsWith(".deb")) await host("dpkg-deb", ["-x", join(debs, deb), root]);
  }
  await rm(debs, { recursive: true });
}

async function pushDebian(): Promise<void> {
  const root = join(work, "debian");
  await mkdir(root);
  await unpackDebs(root, DEBIAN_PACKAGES);
  // What base-passwd's maintainer script would have done (dash ships /bin/sh itself).
  await copyFile(join(root, "usr/share/base-passwd/passwd.master"), join(root, "etc/passwd"));
  await copyFile(join(root, "usr/share/base-passwd/group.master"), join(root, "etc/group"));
  const layer = await tarOf(root);
  const layout = join(work, "debian-layout");
  await writeOciLayout(
    layout,
    "test",
    [{ blob: gzipSync(layer), mediaType: GZIP }],
    { env: ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C.UTF-8"] },
    [diffId(layer)],
  );
  await registry.push(layout, "test", "library/debian:test");
}

async function pushAlpineLike(): Promise<void> {
  const debs = join(work, "musl-debs");
  await mkdir(debs);
  await unpackDebs(debs, ["musl", "busybox-static"]);
  const root = join(work, "alpine");
  for (const dir of ["lib", "bin", "etc", "usr/bin"])
    await mkdir(join(root, dir), { recursive: true });
  await copyFile(
    join(debs, "lib/x86_64-linux-musl/libc.so"),
    join(root, "lib/ld-musl-x86_64.so.1"),
  );
  await copyFile(join(debs, "bin/busybox"), join(root, "bin/busybox"));
  const applets = (await host(join(debs, "bin/busybox"), ["--list"])).toString().split("\n");
  for (const applet of applets.filter((a) => a && a !== "busybox")) {
    await symlink("/bin/busybox", join(root, "bin", applet));
  }
  await writeFile(join(root, "etc/alpine-release"), "3.20.0\n");
  await writeFile(join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/ash\n");
  await writeFile(join(root, "etc/group"), "root:x:0:root\n");
  const layer = await tarOf(root);
  await writeFile(join(work, "alpine.tar"), layer);
  const zstd = await host("zstd", ["-q", "-c", join(work, "alpine.tar")]);
  const layout = join(work, "alpine-layout");
  await writeOciLayout(
    layout,
    "test",
    [{ blob: zstd, mediaType: ZSTD }],
    { env: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], workingDir: "/srv" },
    [diffId(layer)],
  );
  await registry.push(layout, "test", "library/alpine:test");
}

before(async () => {
  await requireRegistryTools();
  work = await mkdtemp(join(tmpdir(), "warren-oci-build-"));
  registry = await startRegistry();
  await pushDebian();
  await pushAlpineLike();
  server = await startServer({
    WARREN_REGISTRY_MIRRORS: `docker.io=${registry.url}`,
    WARREN_INSECURE_REGISTRIES: registry.host,
  });
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
  await registry?.stop();
  await rm(work, { recursive: true, force: true });
  assert.deepEqual(await leakCheck(), []);
  if (server) assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), []);
});

it("builds a template from a Debian-based image: steps, image env, user account, start command", async () => {
  const logs: LogEntry[] = [];
  const template = Template()
    .fromDebianImage("test")
    .runCmd("cat /etc/debian_version > /etc/built-version && id -un > /etc/built-by", {
      user: "root",
    })
    .runCmd("id -un > /home/user/who")
    .setEnvs({ STAGE: "oci" })
    .setWorkdir("/home/user")
    .setStartCmd("echo up > /tmp/up; exec sleep 100000", waitForFile("/tmp/up"));
  await Template.build(template, "oci-debian", { onBuildLogs: (l) => logs.push(l) });
  const messages = logs.map((l) => l.message).join("\n");
  assert.match(messages, /FROM debian:test: pulling/);
  assert.match(messages, /booting sha256:[0-9a-f]{64}/);

  const sandbox = await Sandbox.create("oci-debian");
  try {
    const run = commandOutput(sandbox);
    assert.match(await run("cat /etc/built-version"), /^12\./);
    assert.equal(await run("cat /etc/built-by"), "root");
    assert.equal(await run("cat /home/user/who; whoami; pwd"), "user\nuser\n/home/user");
    assert.equal(await run("echo $STAGE $LANG"), "oci C.UTF-8", "the image's env and the build's");
    assert.equal(await run("cat /tmp/up"), "up", "the start command ran before the capture");
    assert.match(await run("cat /proc/1/cmdline | tr '\\0' ' '"), /tini/, "Warren's init");
  } finally {
    await sandbox.kill();
  }
});

it("stores an image's base layer once: a second template from it boots nothing", async () => {
  const logs: LogEntry[] = [];
  await Template.build(
    Template().fromDebianImage("test").runCmd("echo second > /tmp/second"),
    "oci-debian-2",
    {
      onBuildLogs: (l) => logs.push(l),
    },
  );
  const messages = logs.map((l) => l.message);
  assert.ok(
    messages.some((m) => m.startsWith("CACHED [base] booted sha256:")),
    messages.join("\n"),
  );
  assert.ok(!messages.some((m) => m.startsWith("booting ")), messages.join("\n"));
});

it("builds a template from an Alpine-like musl image", async () => {
  const template = Template()
    .fromAlpineImage("test")
    // Numeric ids: Debian's busybox-static is glibc-static, its name lookups need NSS
    // modules an Alpine tree lacks (Alpine's own busybox is musl and has no such trouble).
    .runCmd("cat /etc/alpine-release > /tmp/release && id -u > /tmp/uid && pwd > /tmp/cwd");
  await Template.build(template, "oci-alpine");
  const sandbox = await Sandbox.create("oci-alpine");
  try {
    assert.equal(await sandbox.files.read("/tmp/release"), "3.20.0\n");
    // No bash in the image: the SDK's commands (sent to /bin/bash) run under /bin/sh.
    const ran = await sandbox.commands.run("cat /etc/alpine-release; echo $0");
    assert.equal(ran.stdout, "3.20.0\n/bin/sh\n");
    assert.equal(await sandbox.files.read("/tmp/uid"), "1000\n", "steps run as the added user");
    assert.equal(await sandbox.files.read("/tmp/cwd"), "/srv\n", "the image's WorkingDir");
    const home = await sandbox.files.list("/home");
    assert.deepEqual(
      home.map((e) => e.name),
      ["user"],
      "the missing user account was added",
    );
  } finally {
    await sandbox.kill();
  }
});

it("fails a build from an image the registry does not have, naming it", async () => {
  await assert.rejects(
    Template.build(Template().fromImage("debian:missing"), "oci-missing"),
    (err: unknown) => {
      assert.ok(err instanceof BuildError);
      assert.match(err.message, /debian:missing/);
      return true;
    },
  );
});
