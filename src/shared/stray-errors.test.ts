// The stray-error policy in a process of its own (it changes process-wide handlers): a
// forgotten rejection is logged and the process lives on; an uncaught exception is logged,
// then the process exits with its code or goes on, as its policy says.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { it } from "node:test";

const MODULE = new URL("./stray-errors.ts", import.meta.url).href;

function run(policy: "exit" | "continue", body: string) {
  const script = `
    import { handleStrayErrors } from ${JSON.stringify(MODULE)};
    const logger = { debug() {}, info() {}, warn() {},
      error: (fields, event) => console.log(event, String(fields.err?.message ?? fields.err)) };
    handleStrayErrors(logger, "test", ${JSON.stringify(policy)});
    ${body}
    setTimeout(() => console.log("still alive"), 50);
  `;
  return spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    encoding: "utf8",
    timeout: 20_000,
  });
}

it("a forgotten rejection is logged and the process goes on", () => {
  const child = run("exit", `Promise.reject(new Error("nobody waited"));`);
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /test\.stray_rejection nobody waited/);
  assert.match(child.stdout, /still alive/);
});

it("an uncaught exception is logged, then the process exits 70 or goes on, as decided", () => {
  const thrown = `setTimeout(() => { throw new Error("state unknown"); }, 0);`;
  const exits = run("exit", thrown);
  assert.equal(exits.status, 70, exits.stderr);
  assert.match(exits.stdout, /test\.stray_exception state unknown/);
  assert.doesNotMatch(exits.stdout, /still alive/);
  const goesOn = run("continue", thrown);
  assert.equal(goesOn.status, 0, goesOn.stderr);
  assert.match(goesOn.stdout, /test\.stray_exception state unknown[\s\S]*still alive/);
});
