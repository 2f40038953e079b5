import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freeLoopbackPort } from "./free-port.js";

const run = promisify(execFile);

// A real registry for the e2e tier: Debian's `docker-registry` (distribution 2.8) on a free
// loopback port, with its storage and config in a temporary directory removed by stop().
// Images are written as OCI layouts by the test (ociLayout below) and pushed with skopeo.

export interface TestRegistry {
  /** `127.0.0.1:<port>`: the host to list as insecure and put in mirror URLs. */
  readonly host: string;
  readonly url: string;
  /** Pushes an OCI layout (`dir`, tag `tag`) as `<repository>:<tag>` with skopeo. */
  push(layout: string, tag: string, repository: string, creds?: string): Promise<void>;
  stop(): Promise<void>;
}

/** Debian packages of the host tools these tests run (not needed by Warren itself). */
export const REGISTRY_TEST_PACKAGES: Readonly<Record<string, string>> = {
  "docker-registry": "docker-registry",
  skopeo: "skopeo",
  htpasswd: "apache2-utils",
  zstd: "zstd",
  debugfs: "e2fsprogs",
};

/** Throws naming the packages to install when a tool of REGISTRY_TEST_PACKAGES is missing. */
export async function requireRegistryTools(): Promise<void> {
  const missing: string[] = [];
  for (const [tool, pkg] of Object.entries(REGISTRY_TEST_PACKAGES)) {
    const found = await run("sh", ["-c", `command -v ${tool}`]).then(
      () => true,
      () => false,
    );
    if (!found) missing.push(pkg);
  }
  if (missing.length > 0) {
    throw new Error(
      `missing host tools for the registry tests: apt-get install -y ${missing.join(" ")}`,
    );
  }
}

/** Starts docker-registry; with `htpasswd` ("user:bcrypt-hash" lines) it wants Basic auth. */
export async function startRegistry(options: { htpasswd?: string } = {}): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "warren-registry-"));
  const port = await freeLoopbackPort();
  const host = `127.0.0.1:${port}`;
  const auth = options.htpasswd
    ? `auth:\n  htpasswd:\n    realm: warren-test\n    path: ${join(dir, "htpasswd")}\n`
    : "";
  if (options.htpasswd) await writeFile(join(dir, "htpasswd"), options.htpasswd);
  await mkdir(join(dir, "storage"));
  await writeFile(
    join(dir, "config.yml"),
    `version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, "storage")}\nhttp:\n  addr: ${host}\n  secret: ${createHash("sha256").update(dir).digest("hex")}\n${auth}`,
  );
  const child: ChildProcess = spawn("docker-registry", ["serve", join(dir, "config.yml")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const status = await fetch(`http://${host}/v2/`).then(
      (res) => res.status,
      () => 0,
    );
    if (status === 200 || status === 401) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`docker-registry did not start on ${host}:\n${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    host,
    url: `http://${host}`,
    push: async (layout, tag, repository, creds) => {
      const args = ["copy", "--quiet", "--dest-tls-verify=false"];
      if (creds) args.push("--dest-creds", creds);
      args.push(`oci:${layout}:${tag}`, `docker://${host}/${repository}`);
      await run("skopeo", args, { maxBuffer: 16 * 1024 * 1024 });
    },
    stop,
  };
}

/** One layer of an OCI layout: its blob (compressed or not) and media type. */
export interface LayoutLayer {
  readonly blob: Buffer;
  readonly mediaType: string;
}

const sha256 = (data: Buffer | string) => createHash("sha256").update(data).digest("hex");

/**
 * Writes an OCI image layout (oci-layout, index.json, blobs/sha256/) with one linux/amd64
 * image of these layers and this config, tagged `tag`: what skopeo pushes.
 */
export async function writeOciLayout(
  dir: string,
  tag: string,
  layers: readonly LayoutLayer[],
  config: { env?: string[]; workingDir?: string; user?: string; cmd?: string[] },
  diffIds: readonly string[],
): Promise<void> {
  const blobs = join(dir, "blobs", "sha256");
  await mkdir(blobs, { recursive: true });
  const put = async (data: Buffer | string) => {
    const hex = sha256(data);
    await writeFile(join(blobs, hex), data);
    return { digest: `sha256:${hex}`, size: Buffer.byteLength(data) };
  };
  const configBlob = await put(
    JSON.stringify({
      architecture: "amd64",
      os: "linux",
      config: {
        Env: config.env ?? [],
        ...(config.workingDir ? { WorkingDir: config.workingDir } : {}),
        ...(config.user ? { User: config.user } : {}),
        ...(config.cmd ? { Cmd: config.cmd } : {}),
      },
      rootfs: { type: "layers", diff_ids: diffIds },
    }),
  );
  const layerDescriptors = [];
  for (const layer of layers) {
    layerDescriptors.push({ mediaType: layer.mediaType, ...(await put(layer.blob)) });
  }
  const manifest = await put(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...configBlob },
      layers: layerDescriptors,
    }),
  );
  await writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  await writeFile(
    join(dir, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          ...manifest,
          platform: { os: "linux", architecture: "amd64" },
          annotations: { "org.opencontainers.image.ref.name": tag },
        },
      ],
    }),
  );
}

/** sha256 of an uncompressed layer, as a config's diff_ids lists it. */
export function diffId(tar: Buffer): string {
  return `sha256:${sha256(tar)}`;
}

/** Runs a host command, returning stdout (e2e helpers: tar, zstd, apt-get, debugfs). */
export async function host(file: string, args: readonly string[], cwd?: string): Promise<Buffer> {
  const { stdout } = await run(file, args, {
    encoding: "buffer",
    maxBuffer: 512 * 1024 * 1024,
    ...(cwd ? { cwd } : {}),
  });
  return stdout;
}

/** A host command's stdout and stderr (debugfs prints "File not found" on stderr). */
export async function hostOutput(
  file: string,
  args: readonly string[],
): Promise<{ stdout: string; stderr: string }> {
  return run(file, args, { maxBuffer: 64 * 1024 * 1024 });
}
