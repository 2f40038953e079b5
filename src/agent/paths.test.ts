import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { resolvePath } from "./paths.js";

const user = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };

describe("resolvePath", () => {
  it("puts relative and ~ paths under home", () => {
    assert.equal(resolvePath("a/b", user), "/home/user/a/b");
    assert.equal(resolvePath("~", user), "/home/user");
    assert.equal(resolvePath("~/x/../y", user), "/home/user/y");
  });
  it("uses the default workdir for an empty path", () => {
    assert.equal(resolvePath("", user, "/work"), "/work");
    assert.equal(resolvePath("", user), "/home/user");
  });
  it("normalises absolute paths and refuses bad ones", () => {
    assert.equal(resolvePath("/a/./b/../c", user), "/a/c");
    assert.throws(() => resolvePath("~other/x", user), /cannot expand/);
    assert.throws(() => resolvePath("a\0b", user), /NUL/);
  });
});
