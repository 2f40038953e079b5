import assert from "node:assert/strict";
import { it } from "node:test";
import { isRecentEnough, parseQemuVersion } from "./qemu-package.js";

it("reads QEMU's version banner and wants 10.0 or newer", () => {
  assert.deepEqual(
    parseQemuVersion("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2)"),
    [10, 0],
  );
  assert.equal(isRecentEnough(parseQemuVersion("QEMU emulator version 7.2.22 (Debian)")), false);
  assert.equal(isRecentEnough([10, 0]), true);
  assert.equal(isRecentEnough([11, 1]), true);
  assert.equal(isRecentEnough(parseQemuVersion("garbage")), false);
});
