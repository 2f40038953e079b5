import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { readdir, readFile, rm, stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { gzipSync } from "node:zlib";
import { makeTar, ZSTD_TAR_FIXTURE } from "../../test/helpers/tar-archive.js";
import { type CommandResult, CommandRunner } from "../host-setup/index.js";
import { MANIFEST_MEDIA_TYPES } from "./manifest.js";
import { pullImage } from "./pull-image.js";

const sha = (data: Buffer | string) => `sha256:${createHash("sha256").update(data).digest("hex")}`;

/**
 * A fake registry: serves one repository (an index → an amd64 manifest → config + 3 layers)
 * behind Bearer token auth, with the token service wanting Basic credentials, as Docker Hub
 * and most registries do. It records requests so tests can see the auth dance and caching.
 */
class FakeRegistry {
  /** Without auth, the registry serves anyone (a registry a caller set up for the attack). */
  constructor(readonly auth = true) {}
  readonly blobs = new Map<string, Buffer>();
  readonly manifests = new Map<string, { body: string; type: string }>();
  readonly requests: string[] = [];
  url = "";
  #server = createServer((req, res) => this.#handle(req, res));

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    this.url = `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  addBlob(data: Buffer): { digest: string; size: number } {
    const digest = sha(data);
    this.blobs.set(digest, data);
    return { digest, size: data.length };
  }

  addManifest(tagOrNull: string | null, doc: object, type: string): string {
    const body = JSON.stringify(doc);
    const digest = sha(body);
    this.manifests.set(digest, { body, type });
    if (tagOrNull) this.manifests.set(tagOrNull, { body, type });
    return digest;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://x");
    this.requests.push(`${req.method} ${url.pathname}`);
    if (url.pathname === "/token") {
      const basic = `Basic ${Buffer.from("alice:s3cret").toString("base64")}`;
      if (req.headers.authorization !== basic) return void res.writeHead(401).end();
      assert.equal(url.searchParams.get("scope"), "repository:library/app:pull");
      assert.equal(url.searchParams.get("service"), "fake-registry");
      res.writeHead(200, { "content-type": "application/json" });
      return void res.end(JSON.stringify({ token: "good-token" }));
    }
    if (this.auth && req.headers.authorization !== "Bearer good-token") {
      res.writeHead(401, {
        "www-authenticate": `Bearer realm="http://${this.url}/token",service="fake-registry",scope="repository:library/app:pull"`,
        "content-type": "application/json",
      });
      return void res.end(JSON.stringify({ errors: [{ code: "UNAUTHORIZED" }] }));
    }
    const match = /^\/v2\/library\/app\/(manifests|blobs)\/(.+)$/.exec(url.pathname);
    const found =
      match?.[1] === "manifests"
        ? this.manifests.get(match[2] ?? "")
        : this.blobs.has(match?.[2] ?? "")
          ? { body: this.blobs.get(match?.[2] ?? "") as Buffer, type: "application/octet-stream" }
          : undefined;
    if (!found) {
      res.writeHead(404, { "content-type": "application/json" });
      return void res.end(
        JSON.stringify({ errors: [{ code: "MANIFEST_UNKNOWN", message: "manifest unknown" }] }),
      );
    }
    res.writeHead(200, { "content-type": found.type });
    res.end(found.body);
  }
}

/** mkfs.ext4 stand-in: records the tree it was asked to pack (the unit tier runs no host tools). */
class TreeRecordingRunner extends CommandRunner {
  files = new Map<string, string>();
  override async run(file: string, args: readonly string[]): Promise<CommandResult> {
    assert.equal(file, "mkfs.ext4");
    const source = args[args.indexOf("-d") + 1] as string;
    for (const path of [
      "etc/passwd",
      "etc/group",
      "etc/os-release",
      "etc/zstd-layer",
      "etc/motd",
    ]) {
      const text = await readFile(join(source, path), "utf8").catch(() => undefined);
      if (text !== undefined) this.files.set(path, text);
    }
    return { code: 0, stdout: "", stderr: "" };
  }
}

const registry = new FakeRegistry();
let cacheDir: string;
let indexDigest: string;
let manifestDigest: string;

before(async () => {
  await registry.start();
  cacheDir = join(tmpdir(), `warren-pull-${process.pid}`);
  const base = registry.addBlob(
    gzipSync(
      makeTar([
        { path: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
        { path: "etc/group", content: "root:x:0:\n" },
        { path: "etc/os-release", content: "ID=fake\n" },
        { path: "etc/motd", content: "bye\n" },
      ]),
    ),
  );
  const top = registry.addBlob(makeTar([{ path: "etc/.wh.motd" }]));
  const zstd = registry.addBlob(ZSTD_TAR_FIXTURE);
  const config = registry.addBlob(
    Buffer.from(
      JSON.stringify({
        architecture: "amd64",
        os: "linux",
        config: { Env: ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"], WorkingDir: "/srv", Cmd: ["sh"] },
      }),
    ),
  );
  manifestDigest = registry.addManifest(
    null,
    {
      schemaVersion: 2,
      mediaType: MANIFEST_MEDIA_TYPES.ociManifest,
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [
        { mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...base },
        { mediaType: "application/vnd.oci.image.layer.v1.tar", ...top },
        { mediaType: "application/vnd.oci.image.layer.v1.tar+zstd", ...zstd },
      ],
    },
    MANIFEST_MEDIA_TYPES.ociManifest,
  );
  const platform = (architecture: string, digest: string) => ({
    mediaType: MANIFEST_MEDIA_TYPES.ociManifest,
    digest,
    size: registry.manifests.get(manifestDigest)?.body.length,
    platform: { os: "linux", architecture },
  });
  indexDigest = registry.addManifest(
    "1.0",
    {
      schemaVersion: 2,
      mediaType: MANIFEST_MEDIA_TYPES.ociIndex,
      manifests: [platform("arm64", `sha256:${"0".repeat(64)}`), platform("amd64", manifestDigest)],
    },
    MANIFEST_MEDIA_TYPES.ociIndex,
  );
  registry.addManifest(
    "arm-only",
    {
      schemaVersion: 2,
      mediaType: MANIFEST_MEDIA_TYPES.dockerList,
      manifests: [platform("arm64", `sha256:${"0".repeat(64)}`)],
    },
    MANIFEST_MEDIA_TYPES.dockerList,
  );
});
after(async () => {
  await registry.close();
  await rm(cacheDir, { recursive: true, force: true });
});

const options = (reference: string, extra: object = {}) => ({
  reference,
  cacheDir,
  mirrors: { "docker.io": `http://${registry.url}` },
  insecureRegistries: [registry.url],
  credentials: { type: "registry", username: "alice", password: "s3cret" } as const,
  ...extra,
});

it("pulls through a mirror with token auth: index → amd64, gzip/plain/zstd layers, whiteout, user", async () => {
  const runner = new TreeRecordingRunner();
  const lines: string[] = [];
  const pulled = await pullImage(
    options("app:1.0", { runner, onProgress: (l: string) => lines.push(l) }),
  );
  assert.equal(pulled.reference, "docker.io/library/app:1.0");
  assert.equal(pulled.digest, manifestDigest);
  assert.deepEqual(pulled.config, {
    env: ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"],
    workingDir: "/srv",
    cmd: ["sh"],
  });
  assert.equal(runner.files.get("etc/os-release"), "ID=fake\n");
  assert.equal(runner.files.get("etc/zstd-layer"), "from a zstd layer\n");
  assert.equal(runner.files.has("etc/motd"), false, "whited out by the second layer");
  assert.match(
    runner.files.get("etc/passwd") ?? "",
    /\nuser::1000:1000::\/home\/user:\/bin\/sh\n$/,
  );
  assert.deepEqual(registry.requests.slice(0, 3), [
    "GET /v2/library/app/manifests/1.0",
    "GET /token",
    "GET /v2/library/app/manifests/1.0",
  ]);
  assert.ok(
    lines.some((l) => /layer 3\/3 sha256:.* downloaded/.test(l)),
    lines.join("\n"),
  );
  assert.ok(
    lines.some((l) => /added user 1000:1000/.test(l)),
    lines.join("\n"),
  );
  // Blobs by digest, the rootfs record by manifest digest, no work dirs left.
  assert.equal((await readdir(join(cacheDir, "blobs/sha256"))).length, 4);
  assert.deepEqual(await readdir(join(cacheDir, "tmp")), []);
  assert.ok((await stat(pulled.rootfs)).isFile(), "the ext4 image made by the (stand-in) mkfs");
});

it("pulls again from the cache: the registry asked for manifests only, a pinned digest too", async () => {
  const before = registry.requests.length;
  const runner = new TreeRecordingRunner();
  const [a, b] = await Promise.all([
    pullImage(options("app:1.0", { runner })),
    pullImage(options("app:1.0", { runner })),
  ]);
  assert.equal(a.rootfs, b.rootfs);
  const pinned = await pullImage(options(`app@${indexDigest}`, { runner }));
  assert.equal(pinned.digest, manifestDigest);
  assert.equal(pinned.rootfs, a.rootfs);
  const made = registry.requests.slice(before);
  assert.ok(
    made.every((r) => r.includes("/manifests/") || r.includes("/token")),
    made.join(", "),
  );
  assert.ok(made.includes(`GET /v2/library/app/manifests/${indexDigest}`), made.join(", "));
  assert.equal(runner.files.size, 0, "no second mkfs");
});

it("names what is wrong: no such tag, no amd64, refused credentials", async () => {
  const reasonIs = (reason: string, pattern: RegExp) => (err: Error & { reason?: string }) =>
    err.reason === reason && pattern.test(err.message);
  await assert.rejects(
    pullImage(options("app:2.0")),
    reasonIs("image_not_found", /MANIFEST_UNKNOWN/),
  );
  await assert.rejects(
    pullImage(options("app:arm-only")),
    reasonIs("image_platform_unsupported", /linux\/arm64/),
  );
  await assert.rejects(
    pullImage(
      options("app:1.0", { credentials: { type: "registry", username: "alice", password: "no" } }),
    ),
    reasonIs("image_access_denied", /refused the credentials/),
  );
  await assert.rejects(
    pullImage(options("app:1.0", { insecureRegistries: [] })),
    reasonIs("invalid_argument", /WARREN_INSECURE_REGISTRIES/),
  );
});

/** Runs a program as `nobody` (a local user who is not the server's): did it work? */
function asNobody(file: string, args: readonly string[]): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(file, args, { uid: 65534, gid: 65534 }, (err, stdout) =>
      resolve(err ? undefined : stdout),
    );
  });
}

/** mkfs.ext4 stand-in that, while the unpacked tree exists, tries to use it as `nobody`. */
class NobodyProbeRunner extends CommandRunner {
  readonly reached: string[] = [];
  override async run(file: string, args: readonly string[]): Promise<CommandResult> {
    assert.equal(file, "mkfs.ext4");
    const source = args[args.indexOf("-d") + 1] as string;
    const suid = join(source, "usr/bin/suid-id");
    assert.equal(
      (await stat(suid)).mode & 0o7777,
      0o4755,
      "the layer's setuid bit, as root kept it",
    );
    const ran = await asNobody(suid, ["-u"]);
    if (ran !== undefined)
      this.reached.push(`ran the image's setuid id as nobody: euid ${ran.trim()}`);
    if ((await asNobody("/bin/ls", [source])) !== undefined) this.reached.push(`listed ${source}`);
    return { code: 0, stdout: "", stderr: "" };
  }
}

it("keeps an image's files from local users while it unpacks and after: no setuid file to run, no blob to read", {
  skip: process.getuid?.() === 0 ? false : "needs root: it runs probes as nobody",
}, async () => {
  const layer = registry.addBlob(
    gzipSync(
      makeTar([
        { path: "usr/bin/suid-id", content: readFileSync("/usr/bin/id"), mode: 0o4755 },
        { path: "etc/private", content: "the tenant's\n", mode: 0o644 },
      ]),
    ),
  );
  const config = registry.addBlob(
    Buffer.from(JSON.stringify({ architecture: "amd64", os: "linux", config: {} })),
  );
  registry.addManifest(
    "suid",
    {
      schemaVersion: 2,
      mediaType: MANIFEST_MEDIA_TYPES.ociManifest,
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...layer }],
    },
    MANIFEST_MEDIA_TYPES.ociManifest,
  );
  const runner = new NobodyProbeRunner();
  const pulled = await pullImage(options("app:suid", { runner }));
  const blob = join(cacheDir, "blobs/sha256", layer.digest.slice("sha256:".length));
  if ((await asNobody("/bin/cat", [blob])) !== undefined) runner.reached.push(`read ${blob}`);
  if ((await asNobody("/bin/cat", [pulled.rootfs])) !== undefined) {
    runner.reached.push(`read ${pulled.rootfs}`);
  }
  assert.deepEqual(runner.reached, [], "nobody reaches the image's files");
  assert.equal((await stat(blob)).mode & 0o777, 0o600);
  for (const dir of ["", "blobs", "blobs/sha256", "tmp", "rootfs"]) {
    assert.equal(
      (await stat(join(cacheDir, dir))).mode & 0o777,
      0o700,
      `${dir || "cacheDir"} is 0700`,
    );
  }
});

it("never hands a cached private image to a caller the registry refuses, by tag or by digest", async () => {
  // The first test pulled app:1.0 with alice's credentials: its rootfs and blobs are cached.
  const anonymous = { credentials: undefined };
  for (const reference of ["app:1.0", `app@${indexDigest}`, `app@${manifestDigest}`]) {
    await assert.rejects(
      pullImage(options(reference, anonymous)),
      (err: Error & { reason?: string }) =>
        err.reason === "image_access_denied" && /refused an anonymous pull/.test(err.message),
      `${reference} without credentials`,
    );
  }
});

it("gives a registry that serves a cached image's manifest but not its blobs nothing from the cache", async () => {
  // A registry of the caller's own, open to all, with the private image's manifest (its
  // digests are no secret) and none of its layers.
  const copycat = new FakeRegistry(false);
  await copycat.start();
  try {
    const index = registry.manifests.get(indexDigest);
    const manifest = registry.manifests.get(manifestDigest);
    assert.ok(index && manifest);
    copycat.manifests.set("stolen", index);
    copycat.manifests.set(indexDigest, index);
    copycat.manifests.set(manifestDigest, manifest);
    const copyOptions = {
      reference: "app:stolen",
      cacheDir,
      mirrors: { "docker.io": `http://${copycat.url}` },
      insecureRegistries: [copycat.url],
      runner: new TreeRecordingRunner(),
    };
    for (const reference of ["app:stolen", `app@${manifestDigest}`]) {
      await assert.rejects(
        pullImage({ ...copyOptions, reference }),
        (err: Error & { reason?: string }) =>
          err.reason === "image_not_found" && /has no blob/.test(err.message),
        reference,
      );
    }
    assert.ok(
      copycat.requests.some((r) => r.startsWith("GET /v2/library/app/blobs/")),
      `the copycat was asked for the blobs: ${copycat.requests.join(", ")}`,
    );
  } finally {
    await copycat.close();
  }
});
