import assert from "node:assert/strict";
import { it } from "node:test";
import { withShellFallback } from "./process-service.js";

it("runs the SDKs' /bin/bash commands with /bin/sh where there is no bash", async () => {
  assert.equal(await withShellFallback("/bin/bash", "/nonexistent/bash"), "/bin/sh");
  assert.equal(await withShellFallback("/bin/bash", process.execPath), "/bin/bash");
  assert.equal(
    await withShellFallback("/usr/bin/python3", "/nonexistent/bash"),
    "/usr/bin/python3",
  );
});
