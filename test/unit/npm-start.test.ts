import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { isAlive } from "../../src/shared/process-alive.js";

// `npm start` is how the README runs Warren, and a supervisor stops it by signalling npm's
// pid. npm hands the signal to its script's shell: unless the script execs node, the shell
// dies and scripts/start.mjs (so the server) runs on, orphaned — and a supervisor that then
// kills the process group cuts the server's clean stop short (namespaces, veths and rules
// left behind).

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** Resolves once `path` exists (false after `ms`). */
async function appears(path: string, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (existsSync(path)) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return existsSync(path);
}

it("a SIGTERM to npm's pid reaches scripts/start.mjs, and npm ends after it", async () => {
  const { scripts } = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    scripts: { start: string };
  };
  const dir = mkdtempSync(join(tmpdir(), "warren-npm-start-"));
  let standIn: number | undefined;
  try {
    writeFileSync(
      join(dir, "package.json"),
      JSON.stringify({ name: "npm-start-probe", version: "0.0.0", private: true, scripts }),
    );
    mkdirSync(join(dir, "scripts"));
    // A stand-in for scripts/start.mjs (the real one sets the machine up first): it notes
    // its pid, and a SIGTERM, and takes a moment to stop as the server does.
    writeFileSync(
      join(dir, "scripts", "start.mjs"),
      `import { writeFileSync } from "node:fs";
process.on("SIGTERM", () => {
  writeFileSync("got-sigterm", "");
  setTimeout(() => process.exit(0), 300);
});
writeFileSync("started", String(process.pid));
setInterval(() => {}, 1000);
`,
    );
    const npm = spawn("npm", ["start", "--silent"], { cwd: dir, stdio: "ignore" });
    const exited = once(npm, "exit");
    assert.equal(await appears(join(dir, "started"), 20_000), true, "the script never started");
    standIn = Number(readFileSync(join(dir, "started"), "utf8"));
    npm.kill("SIGTERM");
    await exited;
    assert.equal(existsSync(join(dir, "got-sigterm")), true, "the script never got the SIGTERM");
    assert.equal(isAlive(standIn), false, "npm ended before the script it ran");
  } finally {
    if (standIn !== undefined && isAlive(standIn)) process.kill(standIn, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
