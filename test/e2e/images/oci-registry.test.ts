import assert from "node:assert/strict";
import { copyFile, link, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { pullImage } from "../../../src/oci-images/index.js";
import {
  diffId,
  host,
  hostOutput,
  type LayoutLayer,
  requireRegistryTools,
  startRegistry,
  type TestRegistry,
  writeOciLayout,
} from "../../helpers/registry.js";
import { runEnv } from "../../helpers/run-env.js";
import { makeTar } from "../../helpers/tar-archive.js";

/**
 * OCI images end to end, as an offline host pulls them: a real registry (Debian's
 * docker-registry on loopback), images assembled here as OCI layouts and pushed with skopeo,
 * pulled through a WARREN_REGISTRY_MIRRORS-style mirror (docker.io=http://127.0.0.1:PORT,
 * listed as insecure) as `debian:test` and `alpine:test`, then checked inside the ext4 with
 * debugfs (no loop mounts). No VM boots here: the template builder boots these rootfs.
 */

const GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
const ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd";

/** `debugfs -R <request> <image>`: reads the ext4 without mounting it (its errors included). */
async function debugfs(image: string, request: string): Promise<string> {
  const { stdout, stderr } = await hostOutput("debugfs", ["-R", request, image]);
  return stdout + stderr.replace(/^debugfs [\d.]+ \(.*\)\n/, "");
}

/** Debian packages, unpacked (not installed) into `root`. */
async function unpackDebs(work: string, root: string, packages: string[]): Promise<void> {
  const debs = join(work, "debs");
  await mkdir(debs, { recursive: true });
  await host("apt-get", ["download", "-q", ...packages], debs);
  for (const deb of await readdir(debs)) {
    if (deb.endsWith(".deb")) await host("dpkg-deb", ["-x", join(debs, deb), root]);
  }
  await rm(debs, { recursive: true });
}

/** A tar of a directory (GNU tar: numeric owners, hard links within it kept as links). */
const tarOf = (dir: string) =>
  host("tar", ["--numeric-owner", "--sort=name", "-C", dir, "-cf", "-", "."]);

describe("OCI images from a registry through a mirror", () => {
  let work: string;
  let registry: TestRegistry;
  let cacheDir: string;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "warren-oci-e2e-"));
    cacheDir = join(runEnv().dataDir, "oci-cache");
    await requireRegistryTools();
    registry = await startRegistry();
  });
  after(async () => {
    await registry?.stop();
    await rm(work, { recursive: true, force: true });
  });

  const mirrorOptions = () => ({
    cacheDir,
    mirrors: { "docker.io": registry.url },
    insecureRegistries: [registry.host],
  });

  it("pulls a two-layer Debian image: whiteout, opaque dir, hard links, user account", async () => {
    // Layer 1: a small Debian tree from real packages, unpacked with dpkg-deb, plus the
    // accounts base-passwd's postinst would write and files the next layer removes.
    const base = join(work, "debian-base");
    await mkdir(base);
    await unpackDebs(work, base, [
      "base-files",
      "base-passwd",
      "bash",
      "libc6",
      "libtinfo6",
      "sudo",
    ]);
    await copyFile(join(base, "usr/share/base-passwd/passwd.master"), join(base, "etc/passwd"));
    await copyFile(join(base, "usr/share/base-passwd/group.master"), join(base, "etc/group"));
    await writeFile(join(base, "etc/doomed"), "removed by layer 2\n");
    await mkdir(join(base, "opt/old"), { recursive: true });
    await writeFile(join(base, "opt/old/stale"), "hidden by layer 2's opaque marker\n");
    await link(join(base, "bin/bash"), join(base, "bin/bash-hardlink"));
    const layer1 = await tarOf(base);
    // Layer 2, written entry by entry: a whiteout, an opaque directory, a hard link to a file
    // of layer 1, an env file.
    const layer2 = makeTar([
      { path: "etc/.wh.doomed" },
      { path: "opt/old/", type: "Directory" },
      { path: "opt/old/.wh..wh..opq" },
      { path: "opt/old/fresh", content: "from layer 2\n" },
      { path: "bin/bash-layer2-link", type: "Link", linkpath: "bin/bash" },
    ]);
    const layout = join(work, "debian-layout");
    const layers: LayoutLayer[] = [
      { blob: gzipSync(layer1), mediaType: GZIP },
      { blob: gzipSync(layer2), mediaType: GZIP },
    ];
    await writeOciLayout(
      layout,
      "test",
      layers,
      {
        env: ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
        workingDir: "/opt",
        cmd: ["bash"],
      },
      [diffId(layer1), diffId(layer2)],
    );
    await registry.push(layout, "test", "library/debian:test");

    const lines: string[] = [];
    const pulled = await pullImage({
      ...mirrorOptions(),
      reference: "debian:test",
      onProgress: (line) => lines.push(line),
    });
    assert.equal(pulled.reference, "docker.io/library/debian:test");
    assert.deepEqual(pulled.config, {
      env: ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
      workingDir: "/opt",
      cmd: ["bash"],
    });
    assert.ok(pulled.sizeMiB > 1024, `${pulled.sizeMiB} MiB includes ~1 GiB of headroom`);
    assert.ok(
      lines.some((l) => /layer 2\/2 .* downloaded/.test(l)),
      lines.join("\n"),
    );

    const image = pulled.rootfs;
    assert.match(await debugfs(image, "cat /usr/lib/os-release"), /ID=debian/);
    const passwd = await debugfs(image, "cat /etc/passwd");
    assert.match(passwd, /^root:\*:0:0:root:\/root:\/bin\/bash$/m, "the image's own lines kept");
    assert.match(passwd, /^user::1000:1000::\/home\/user:\/bin\/bash$/m);
    assert.match(await debugfs(image, "cat /etc/group"), /^user:x:1000:$/m);
    assert.equal(
      await debugfs(image, "cat /etc/sudoers.d/user"),
      "user ALL=(ALL:ALL) NOPASSWD: ALL\n",
    );
    assert.match(await debugfs(image, "stat /home/user"), /User:\s+1000\s+Group:\s+1000/);
    // The whiteout and the opaque directory applied.
    assert.match(await debugfs(image, "stat /etc/doomed"), /File not found/);
    assert.doesNotMatch(await debugfs(image, "ls /opt/old"), /stale/);
    assert.equal(await debugfs(image, "cat /opt/old/fresh"), "from layer 2\n");
    // Hard links kept, within layer 1 and from layer 2 onto layer 1's file: one inode, 3 links.
    const inode = (text: string) => /Inode: (\d+)/.exec(text)?.[1];
    const bash = await debugfs(image, "stat /bin/bash");
    assert.match(bash, /Links: 3/);
    assert.equal(inode(await debugfs(image, "stat /bin/bash-hardlink")), inode(bash));
    assert.equal(inode(await debugfs(image, "stat /bin/bash-layer2-link")), inode(bash));
    assert.match(bash, /Mode:\s+0755/);
    // Owners and setuid from the archive (sudo is setuid root).
    assert.match(
      await debugfs(image, "stat /usr/bin/sudo"),
      /Mode:\s+04755[\s\S]*User:\s+0\s+Group:\s+0/,
    );
    // A second pull finds it cached; nothing is left in the work dir.
    lines.length = 0;
    const again = await pullImage({
      ...mirrorOptions(),
      reference: "debian:test",
      onProgress: (l) => lines.push(l),
    });
    assert.equal(again.rootfs, pulled.rootfs);
    assert.ok(
      lines.some((l) => /cached rootfs/.test(l)),
      lines.join("\n"),
    );
    assert.deepEqual(await readdir(join(cacheDir, "tmp")), []);
  });

  it("pulls an Alpine-like musl image with zstd layers", async () => {
    // Alpine's own packages are not reachable from the test hosts, so this is an Alpine-like
    // tree from Debian's musl and busybox-static: /lib/ld-musl-x86_64.so.1, /bin/busybox with
    // applet links, /etc/alpine-release, busybox-style accounts without sudo or bash.
    const root = join(work, "alpine-root");
    const debs = join(work, "musl-debs");
    await mkdir(debs);
    await unpackDebs(work, debs, ["musl", "busybox-static"]);
    await mkdir(join(root, "lib"), { recursive: true });
    await mkdir(join(root, "bin"));
    await mkdir(join(root, "etc"));
    await copyFile(
      join(debs, "lib/x86_64-linux-musl/libc.so"),
      join(root, "lib/ld-musl-x86_64.so.1"),
    );
    await symlink("ld-musl-x86_64.so.1", join(root, "lib/libc.musl-x86_64.so.1"));
    await copyFile(join(debs, "bin/busybox"), join(root, "bin/busybox"));
    for (const applet of ["sh", "ash", "ls", "cat", "echo", "mkdir", "rm"]) {
      await symlink("/bin/busybox", join(root, "bin", applet));
    }
    await writeFile(join(root, "etc/alpine-release"), "3.20.0\n");
    await writeFile(
      join(root, "etc/passwd"),
      "root:x:0:0:root:/root:/bin/ash\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n",
    );
    await writeFile(join(root, "etc/group"), "root:x:0:root\nnobody:x:65534:\n");
    await writeFile(join(root, "etc/shadow"), "root:*::0:::::\nnobody:!::0:::::\n", {
      mode: 0o640,
    });
    const layer1 = await tarOf(root);
    const layer2 = makeTar([{ path: "etc/motd", content: "Welcome to Alpine-like!\n" }]);
    const zstd = async (tar: Buffer) => {
      await writeFile(join(work, "layer.tar"), tar);
      return host("zstd", ["-q", "-c", join(work, "layer.tar")]);
    };
    const [z1, z2] = [await zstd(layer1), await zstd(layer2)];
    const layout = join(work, "alpine-layout");
    await writeOciLayout(
      layout,
      "test",
      [
        { blob: z1, mediaType: ZSTD },
        { blob: z2, mediaType: ZSTD },
      ],
      {
        env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        cmd: ["/bin/sh"],
      },
      [diffId(layer1), diffId(layer2)],
    );
    await registry.push(layout, "test", "library/alpine:test");
    // skopeo pushes the zstd blobs as they are: the registry serves the same media type.
    const manifest = (await (
      await fetch(`${registry.url}/v2/library/alpine/manifests/test`, {
        headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
      })
    ).json()) as { layers: { mediaType: string }[] };
    assert.deepEqual(
      manifest.layers.map((l) => l.mediaType),
      [ZSTD, ZSTD],
    );

    const pulled = await pullImage({ ...mirrorOptions(), reference: "alpine:test" });
    const image = pulled.rootfs;
    assert.equal(await debugfs(image, "cat /etc/alpine-release"), "3.20.0\n");
    assert.equal(await debugfs(image, "cat /etc/motd"), "Welcome to Alpine-like!\n");
    const passwd = await debugfs(image, "cat /etc/passwd");
    assert.match(passwd, /^root:x:0:0:root:\/root:\/bin\/ash$/m);
    assert.match(passwd, /^user:x:1000:1000::\/home\/user:\/bin\/sh$/m, "no bash here: sh");
    assert.match(await debugfs(image, "cat /etc/shadow"), /^user::\d+:0:99999:7:::$/m);
    assert.match(await debugfs(image, "stat /etc/sudoers.d/user"), /File not found/);
    assert.match(await debugfs(image, "stat /bin/sh"), /Type: symlink/);
    assert.match(await debugfs(image, "stat /lib/ld-musl-x86_64.so.1"), /Type: regular/);
  });

  it("says which image is missing", async () => {
    await assert.rejects(
      pullImage({ ...mirrorOptions(), reference: "debian:nope" }),
      (err: Error & { reason?: string }) =>
        err.reason === "image_not_found" && /docker\.io\/library\/debian:nope/.test(err.message),
    );
  });
});

describe("OCI images from a registry with basic auth (htpasswd)", () => {
  let work: string;
  let registry: TestRegistry;

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "warren-oci-auth-"));
    const htpasswd = (await host("htpasswd", ["-Bbn", "alice", "s3cret"])).toString("utf8");
    registry = await startRegistry({ htpasswd });
  });
  after(async () => {
    await registry?.stop();
    await rm(work, { recursive: true, force: true });
  });

  it("pulls with the username and password, and refuses without, also once cached", async () => {
    const layer = makeTar([
      { path: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
      { path: "etc/private", content: "behind basic auth\n" },
    ]);
    const layout = join(work, "layout");
    await writeOciLayout(layout, "v1", [{ blob: gzipSync(layer), mediaType: GZIP }], {}, [
      diffId(layer),
    ]);
    await registry.push(layout, "v1", "team/private:v1", "alice:s3cret");
    const options = {
      reference: `${registry.host}/team/private:v1`,
      cacheDir: join(runEnv().dataDir, "oci-cache-auth"),
      insecureRegistries: [registry.host],
    };
    await assert.rejects(
      pullImage(options),
      (err: Error & { reason?: string }) => err.reason === "image_access_denied",
    );
    await assert.rejects(
      pullImage({
        ...options,
        credentials: { type: "registry", username: "alice", password: "bad" },
      }),
      (err: Error & { reason?: string }) => err.reason === "image_access_denied",
    );
    const pulled = await pullImage({
      ...options,
      credentials: { type: "registry", username: "alice", password: "s3cret" },
    });
    assert.equal(await debugfs(pulled.rootfs, "cat /etc/private"), "behind basic auth\n");
    assert.match(await debugfs(pulled.rootfs, "cat /etc/passwd"), /^user::1000:1000:/m);
    // Cached now, but not for a caller without the credentials: by tag nor by digest.
    for (const reference of [options.reference, `${registry.host}/team/private@${pulled.digest}`]) {
      await assert.rejects(
        pullImage({ ...options, reference }),
        (err: Error & { reason?: string }) => err.reason === "image_access_denied",
        reference,
      );
    }
  });
});
