import assert from "node:assert/strict";
import { constants } from "node:fs";
import { describe, it } from "node:test";
import { permissionString } from "./file-mode.js";

describe("permissionString (Go's FileMode.String)", () => {
  const cases: Array<[number, string]> = [
    [constants.S_IFREG | 0o644, "-rw-r--r--"],
    [constants.S_IFDIR | 0o755, "drwxr-xr-x"],
    [constants.S_IFLNK | 0o777, "Lrwxrwxrwx"],
    [constants.S_IFDIR | 0o1777, "dtrwxrwxrwx"],
    [constants.S_IFREG | 0o4755, "urwxr-xr-x"],
    [constants.S_IFIFO | 0o600, "prw-------"],
    [constants.S_IFCHR | 0o666, "Dcrw-rw-rw-"],
  ];
  for (const [mode, expected] of cases) {
    it(`formats ${mode.toString(8)} as ${expected}`, () =>
      assert.equal(permissionString({ mode }), expected));
  }
});
