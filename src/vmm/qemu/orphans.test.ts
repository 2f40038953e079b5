import assert from "node:assert/strict";
import { it } from "node:test";
import { isVmmUnder } from "./orphans.js";

const cmdline = (...argv: string[]) => argv.join("\0");

it("isVmmUnder: a QEMU with a path under the run dir, and nothing else", () => {
  const run = "/var/lib/warren/run";
  const ours = cmdline(
    "qemu-system-x86_64",
    "-qmp",
    `unix:${run}/abc/qmp.sock,server=on,wait=off`,
    "-drive",
    `file=${run}/abc/disk.qcow2,if=none`,
  );
  assert.equal(isVmmUnder(ours, run), true);
  assert.equal(isVmmUnder(ours, `${run}/`), true, "a trailing slash is the same dir");
  assert.equal(
    isVmmUnder(cmdline("/usr/bin/qemu-system-x86_64", `${run}/x/console.log`), run),
    true,
  );

  const elsewhere = cmdline("qemu-system-x86_64", "-qmp", `unix:/srv${run}/abc/qmp.sock`);
  assert.equal(isVmmUnder(elsewhere, run), false, "another server's dir that contains ours");
  const sibling = cmdline("qemu-system-x86_64", `file=${run}2/abc/disk.qcow2`);
  assert.equal(isVmmUnder(sibling, run), false, "a sibling dir with a longer name");
  const notQemu = cmdline("sleep", `${run}/abc/qmp.sock`);
  assert.equal(isVmmUnder(notQemu, run), false, "only QEMU processes");
  assert.equal(isVmmUnder("", run), false);
});
