// Template builds through the real `e2b` SDK builder against a real server: a template
// from `base` with a COPY of a folder holding symlinks, RUN as root and as `user`, WORKDIR,
// ENV and a start command with a waitForPort ready check; a sandbox from it sees all of it
// at once. A failing RUN fails with its exit code and output and leaves no snapshot, layer
// or VM; an unchanged rebuild is all cache hits; tags, `exists`, background builds.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  BuildError,
  type LogEntry,
  Sandbox,
  Template,
  waitForFile,
  waitForPort,
  waitForProcess,
  waitForURL,
} from "e2b";
import { api, commandOutput, useServer, waitFor } from "../helpers/server.js";

const server = useServer();
let context: string;

before(async () => {
  context = await mkdtemp(join(tmpdir(), "warren-build-"));
  await mkdir(join(context, "app", "sub"), { recursive: true });
  await writeFile(join(context, "app", "hello.txt"), "hello from the context\n");
  await writeFile(join(context, "app", "sub", "nested.txt"), "nested\n");
  await symlink("hello.txt", join(context, "app", "link"));
  await symlink("sub", join(context, "app", "dirlink"));
});

after(() => rm(context, { recursive: true, force: true }));

function webTemplate() {
  return Template({ fileContextPath: context })
    .fromBaseImage()
    .copy("app", "/home/user/app")
    .runCmd("echo root-was-here > /root-marker && chmod 644 /root-marker", { user: "root" })
    .runCmd("whoami > /home/user/whoami.txt")
    .setWorkdir("/home/user/app")
    .setEnvs({ GREETING: "hello from the template" })
    .setStartCmd("python3 -m http.server 8080", waitForPort(8080));
}

/** Snapshot directories on disk: a failed build must not add any. */
async function snapshotDirs(): Promise<string[]> {
  return (await readdir(join(server.dataDir, "snapshots"))).sort();
}

describe("a template built with the SDK", () => {
  const logs: LogEntry[] = [];
  let templateId = "";

  before(async () => {
    const built = await Template.build(webTemplate(), "e2e-web", {
      onBuildLogs: (entry) => logs.push(entry),
    });
    templateId = built.templateId;
  });

  it("streams the build's logs with timestamps and levels", () => {
    const messages = logs.map((l) => l.message);
    assert.ok(
      messages.some((m) => m.includes("RUN (as root) echo root-was-here")),
      messages.join("\n"),
    );
    assert.ok(
      messages.some((m) => m.includes("[finalize] captured")),
      messages.join("\n"),
    );
    assert.ok(
      logs.every((l) => l.timestamp instanceof Date && !Number.isNaN(l.timestamp.getTime())),
    );
    assert.ok(logs.every((l) => ["debug", "info", "warn", "error"].includes(l.level)));
  });

  it("gives sandboxes its files, users, workdir, env and running server at once", async () => {
    const sandbox = await Sandbox.create("e2e-web");
    try {
      const run = commandOutput(sandbox);
      assert.equal(await run("cat /home/user/app/hello.txt"), "hello from the context");
      assert.equal(await run("cat /home/user/app/sub/nested.txt"), "nested");
      assert.equal(await run("readlink /home/user/app/link"), "hello.txt", "symlinks are kept");
      assert.equal(await run("readlink /home/user/app/dirlink"), "sub");
      assert.equal(await run("stat -c %U:%G /home/user/app/hello.txt"), "user:user");
      assert.equal(await run("cat /root-marker; stat -c %U /root-marker"), "root-was-here\nroot");
      assert.equal(
        await run("cat /home/user/whoami.txt"),
        "user",
        "RUN without a user runs as user",
      );
      assert.equal(await run("pwd"), "/home/user/app", "WORKDIR is the default cwd");
      assert.equal(await run("whoami"), "user");
      assert.equal(await run("echo $GREETING"), "hello from the template");
      // The start command was captured running: no wait, no restart.
      assert.equal(
        await run("curl -s -o /dev/null -w '%{http_code}' localhost:8080/hello.txt"),
        "200",
      );
      assert.equal(await run("curl -s localhost:8080/hello.txt"), "hello from the context");
      assert.equal(sandbox.sandboxId.length > 0, true);
    } finally {
      await sandbox.kill();
    }
  });

  it("rebuilds from the cache when nothing changed", async () => {
    const again: LogEntry[] = [];
    const before = await snapshotDirs();
    const started = Date.now();
    const built = await Template.build(webTemplate(), "e2e-web", {
      onBuildLogs: (entry) => again.push(entry),
    });
    const messages = again.map((l) => l.message);
    assert.equal(built.templateId, templateId, "the same name is the same template");
    for (const step of ["[1]", "[2]", "[3]", "[4]", "[finalize]"]) {
      assert.ok(
        messages.some((m) => m.startsWith(`CACHED ${step}`)),
        `${step} is a cache hit:\n${messages.join("\n")}`,
      );
    }
    assert.ok(!messages.some((m) => m.includes("build VM")), "no build VM was started");
    assert.deepEqual(await snapshotDirs(), before, "nothing new was captured");
    assert.ok(Date.now() - started < 30_000, "a cached build takes seconds");
  });

  it("is found by name, and `exists` tells names apart", async () => {
    assert.equal(await Template.exists("e2e-web"), true);
    assert.equal(await Template.exists("no-such-template"), false);
    const listed = await api(server, "GET", "/templates");
    const names = (listed.body as { names: string[] }[]).flatMap((t) => t.names);
    assert.ok(names.includes("e2e-web") && names.includes("base"), names.join(", "));
  });

  it("tags a build, creates from a tag, removes the tag", async () => {
    const assigned = await Template.assignTags("e2e-web:default", ["prod"]);
    assert.deepEqual(assigned.tags, ["prod"]);
    const tags = (await Template.getTags(templateId)).map((t) => t.tag).sort();
    assert.deepEqual(tags, ["default", "prod"]);
    const sandbox = await Sandbox.create("e2e-web:prod");
    assert.equal((await sandbox.commands.run("cat /home/user/whoami.txt")).stdout.trim(), "user");
    await sandbox.kill();
    await Template.removeTags("e2e-web", "prod");
    await assert.rejects(Sandbox.create("e2e-web:prod"), /not found/i);
  });
});

it("fails a build at its failing RUN, with the exit code and output, leaving nothing", async () => {
  const before = await snapshotDirs();
  const failing = Template()
    .fromBaseImage()
    .runCmd("echo first-step > /tmp/first")
    .runCmd("echo about-to-fail; exit 3");
  const error = await Template.build(failing, "e2e-failing").then(
    () => assert.fail("the build succeeded"),
    (err: unknown) => err,
  );
  assert.ok(error instanceof BuildError, String(error));
  assert.match(error.message, /exit code 3/);
  assert.match(error.message, /about-to-fail/);
  assert.deepEqual(await snapshotDirs(), before, "no layer of the failed build is kept");
  assert.equal(await Template.exists("e2e-failing"), false);
  const sandboxes = await api(server, "GET", "/v2/sandboxes");
  assert.deepEqual(sandboxes.body, [], "no build VM is left (nor listed)");
});

it("builds in the background, polled with getBuildStatus, bypassing the cache when asked", async () => {
  const small = Template().fromBaseImage().runCmd("echo background > /tmp/bg");
  await Template.build(small, "e2e-bg");
  const info = await Template.buildInBackground(small, "e2e-bg", { skipCache: true });
  let offset = 0;
  const messages: string[] = [];
  for (;;) {
    const status = await Template.getBuildStatus(info, { logsOffset: offset });
    offset += status.logEntries.length;
    messages.push(...status.logEntries.map((l) => l.message));
    if (status.status === "ready" || status.status === "error") {
      assert.equal(status.status, "ready", messages.join("\n"));
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  assert.ok(!messages.some((m) => m.startsWith("CACHED [1]")), "skipCache ran the step again");
  const sandbox = await Sandbox.create("e2e-bg");
  assert.equal((await sandbox.commands.run("cat /tmp/bg")).stdout.trim(), "background");
  await sandbox.kill();
});

it("refuses a step type it cannot build, naming the step", async () => {
  const requested = await api(server, "POST", "/v3/templates", { name: "e2e-bad" });
  assert.equal(requested.status, 202);
  const { templateID, buildID } = requested.body as { templateID: string; buildID: string };
  const started = await api(server, "POST", `/v2/templates/${templateID}/builds/${buildID}`, {
    fromImage: "e2bdev/base",
    steps: [
      { type: "RUN", args: ["true"] },
      { type: "HEALTHCHECK", args: ["true"] },
    ],
  });
  assert.equal(started.status, 400);
  assert.match(
    String((started.body as { message: string }).message),
    /step 2: unsupported step type "HEALTHCHECK"/,
  );
});

it("builds from a Dockerfile, with a waitForURL ready check", async () => {
  const dockerfile = [
    "FROM e2bdev/base",
    "RUN mkdir -p /srv && echo built-as-$(whoami) > /srv/who",
    "COPY app /srv/app",
    "ENV MODE=dockerfile OTHER=two",
    "WORKDIR /srv/app",
    "USER user",
  ].join("\n");
  const template = Template({ fileContextPath: context })
    .fromDockerfile(dockerfile)
    .setStartCmd("python3 -m http.server 9000", waitForURL("http://localhost:9000/hello.txt"));
  await Template.build(template, "e2e-dockerfile");
  const sandbox = await Sandbox.create("e2e-dockerfile");
  try {
    const run = commandOutput(sandbox);
    assert.equal(await run("cat /srv/who"), "built-as-root", "a Dockerfile's RUN runs as root");
    assert.equal(await run("cat /srv/app/hello.txt"), "hello from the context");
    assert.equal(await run("echo $MODE $OTHER"), "dockerfile two");
    assert.equal(await run("pwd; whoami"), "/srv/app\nuser");
    assert.equal(await run("curl -s localhost:9000/hello.txt"), "hello from the context");
  } finally {
    await sandbox.kill();
  }
});

it("runs the builder's helpers (files, users, git) and a start command found by waitForProcess", async () => {
  const template = Template({ fileContextPath: context })
    .fromBaseImage()
    .copy("app/hello.txt", "/home/user/private.txt", { mode: 0o600, user: "root" })
    .copy("app", "/home/user/resolved", { resolveSymlinks: true })
    .makeDir("/home/user/made/deep", { mode: 0o700 })
    .makeSymlink("/home/user/private.txt", "/home/user/private-link")
    .runCmd("echo temp > /home/user/temp && echo doomed > /home/user/doomed")
    .rename("/home/user/temp", "/home/user/renamed")
    .remove("/home/user/doomed")
    .runCmd(
      "git init -q /tmp/src && git -C /tmp/src -c user.email=t@e -c user.name=t commit -q --allow-empty -m first",
    )
    .gitClone("/tmp/src", "/home/user/cloned")
    .setUser("tester")
    .runCmd("whoami > /tmp/tester-was-here")
    .setStartCmd("sleep 100000", waitForProcess("sleep"));
  await Template.build(template, "e2e-helpers");
  const sandbox = await Sandbox.create("e2e-helpers");
  try {
    const run = commandOutput(sandbox);
    assert.equal(await run("stat -c '%a %U' /home/user/private.txt", "root"), "600 root");
    assert.equal(await run("test -L /home/user/resolved/link || echo file"), "file");
    assert.equal(await run("cat /home/user/resolved/link"), "hello from the context");
    assert.equal(await run("stat -c %a /home/user/made/deep"), "700");
    assert.equal(await run("readlink /home/user/private-link"), "/home/user/private.txt");
    assert.equal(
      await run("cat /home/user/renamed; test -e /home/user/doomed || echo gone"),
      "temp\ngone",
    );
    // As its owner: git refuses a repository another user owns (the default user is tester).
    assert.equal(await run("git -C /home/user/cloned log --format=%s", "user"), "first");
    assert.equal(
      await run("cat /tmp/tester-was-here; whoami"),
      "tester\ntester",
      "USER added the user and is the default",
    );
    assert.match(await run("pgrep -x sleep"), /^\d+$/, "the start command runs in the sandbox");
  } finally {
    await sandbox.kill();
  }
});

it("fails a build whose start command exits before its ready check passes", async () => {
  const template = Template()
    .fromBaseImage()
    .setStartCmd("echo starting up; exit 4", waitForFile("/tmp/never-created"));
  await assert.rejects(Template.build(template, "e2e-bad-start"), (err: unknown) => {
    assert.ok(err instanceof BuildError);
    assert.match(err.message, /exit code 4/);
    assert.match(err.message, /starting up/);
    return true;
  });
  assert.equal(await Template.exists("e2e-bad-start"), false);
});

it("honours cpuCount, memoryMB and minFreeDiskMb (the base rootfs booted with that shape, also from fromTemplate('base'))", async () => {
  const template = Template().fromBaseImage().runCmd("echo shaped > /tmp/shaped");
  await Template.build(template, "e2e-shape", { cpuCount: 1, memoryMB: 768, minFreeDiskMb: 1024 });
  const listed = await api(server, "GET", "/templates");
  const row = (listed.body as { names: string[]; cpuCount: number; memoryMB: number }[]).find((t) =>
    t.names.includes("e2e-shape"),
  );
  assert.deepEqual([row?.cpuCount, row?.memoryMB], [1, 768]);
  const sandbox = await Sandbox.create("e2e-shape");
  try {
    const run = commandOutput(sandbox);
    assert.equal(await run("nproc"), "1");
    const memKiB = Number(await run("awk '/MemTotal/ {print $2}' /proc/meminfo"));
    assert.ok(memKiB > 600 * 1024 && memKiB <= 768 * 1024, `MemTotal ${memKiB} KiB`);
    const freeKiB = Number(await run("df -k --output=avail / | tail -1"));
    assert.ok(freeKiB >= 900 * 1024, `${freeKiB} KiB free on /`);
    assert.equal(await run("cat /tmp/shaped"), "shaped");
  } finally {
    await sandbox.kill();
  }
  // fromTemplate('base') with another shape boots base's rootfs with it (the layer above).
  const fromBase = Template().fromTemplate("base").runCmd("echo from-base > /tmp/from");
  await Template.build(fromBase, "e2e-shape-from-base", {
    cpuCount: 1,
    memoryMB: 768,
    minFreeDiskMb: 1024,
  });
  const reshaped = await Sandbox.create("e2e-shape-from-base");
  try {
    const run = commandOutput(reshaped);
    assert.equal(await run("nproc"), "1");
    assert.equal(await run("cat /tmp/from"), "from-base");
  } finally {
    await reshaped.kill();
  }
});

it("deletes a built template with its builds, tags and the layers only it used", async () => {
  const before = await snapshotDirs();
  const unique = Template().fromBaseImage().runCmd(`echo ${Date.now()} > /tmp/unique`);
  const built = await Template.build(unique, "e2e-delete");
  assert.ok((await snapshotDirs()).length > before.length, "the build captured layers");
  const sandbox = await Sandbox.create("e2e-delete");
  const refused = await api(server, "DELETE", `/templates/${built.templateId}`);
  assert.equal(refused.status, 409, "not while a sandbox runs on it");
  await sandbox.kill();
  const deleted = await api(server, "DELETE", "/templates/e2e-delete");
  assert.equal(deleted.status, 204);
  assert.equal(await Template.exists("e2e-delete"), false);
  assert.equal((await api(server, "GET", `/templates/${built.templateId}`)).status, 404);
  await waitFor("its layers' snapshot files to go", async () => {
    const now = await snapshotDirs();
    return now.every((dir) => before.includes(dir));
  });
});
