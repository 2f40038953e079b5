import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { describe, it } from "node:test";
import { parseAptCacheDepends } from "./apt.js";
import { CommandRunner } from "./command.js";
import { missingPackages } from "./host-packages.js";
import { pickKernelImage } from "./kernel-package.js";

describe("host packages", () => {
  it("reports only what dpkg does not have installed", {
    skip: !existsSync("/usr/bin/dpkg-query") && "not a Debian host",
  }, async () => {
    const missing = await missingPackages(new CommandRunner(), ["dpkg", "warren-no-such-package"]);
    assert.deepEqual(missing, ["warren-no-such-package"]);
  });

  it("finds the real kernel image behind the cloud metapackage", () => {
    const deps = parseAptCacheDepends(`linux-image-cloud-amd64
  Depends: linux-image-6.1.0-57-cloud-amd64
 |Depends: <linux-image-virtual>
`);
    assert.deepEqual(deps, ["linux-image-6.1.0-57-cloud-amd64"]);
    assert.equal(pickKernelImage(deps), "linux-image-6.1.0-57-cloud-amd64");
    assert.equal(pickKernelImage(["linux-base"]), undefined);
  });
});
