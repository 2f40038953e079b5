import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseLdd } from "./shared-libs.js";
import { elfInterpreter } from "./static-binaries.js";

describe("shared libraries and ELF", () => {
  it("parses ldd output: libraries, loader, missing ones; skips the vDSO", () => {
    const parsed = parseLdd(`	linux-vdso.so.1 (0x00007ffd5b9f2000)
	libdl.so.2 => /lib/x86_64-linux-gnu/libdl.so.2 (0x00007f2c3c1f4000)
	libstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f2c3be00000)
	libgone.so.1 => not found
	/lib64/ld-linux-x86-64.so.2 (0x00007f2c3c212000)
`);
    assert.equal(parsed.loader, "/lib64/ld-linux-x86-64.so.2");
    assert.deepEqual(
      [...parsed.libs],
      [
        ["libdl.so.2", "/lib/x86_64-linux-gnu/libdl.so.2"],
        ["libstdc++.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6"],
        ["libgone.so.1", undefined],
      ],
    );
  });

  it("reads the program interpreter of a dynamic ELF file", async () => {
    assert.match((await elfInterpreter(process.execPath)) ?? "", /ld-linux-x86-64\.so\.2$/);
  });

  it("rejects what is not an ELF file", async () => {
    await assert.rejects(elfInterpreter(new URL(import.meta.url).pathname), /not a 64-bit/);
  });
});
