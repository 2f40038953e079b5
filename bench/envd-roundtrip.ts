// envd on the host, driven by the real e2b SDK: command round trip and a 10 MB write/read.
// Run: npm run bench:envd   (as root; builds nothing — run npm run build first)
import { randomBytes } from "node:crypto";
import { Sandbox } from "e2b";
import { startEnvd } from "../test/helpers/envd.js";
import { measure, report, summarize } from "./lib/report.js";

const FILE_BYTES = 10 * 1024 * 1024;

const env = await startEnvd();
try {
  const sbx = await Sandbox.create();
  const run = await measure(50, () => sbx.commands.run("true"));
  const rpc = await measure(50, () => sbx.files.exists("/tmp"));
  const payload = randomBytes(FILE_BYTES);
  const path = `/tmp/warren-bench-${process.pid}.bin`;
  const write = await measure(10, () => sbx.files.write(path, new Uint8Array(payload).buffer), 1);
  const read = await measure(10, () => sbx.files.read(path, { format: "bytes" }), 1);
  const check = await sbx.files.read(path, { format: "bytes" });
  if (!Buffer.from(check).equals(payload))
    throw new Error("10 MB read-back differs from what was written");
  await sbx.files.remove(path);

  const mbps = (ms: number) => Math.round((FILE_BYTES / 2 ** 20 / (ms / 1000)) * 10) / 10;
  const rows = [
    summarize("command round trip (run 'true')", "ms", run),
    summarize("unary RPC round trip (files.exists)", "ms", rpc),
    summarize("10 MB file write", "ms", write),
    summarize("10 MB file read", "ms", read),
  ];
  report("envd-roundtrip", rows, {
    throughputMiBps: { write: mbps(rows[2]?.p50 ?? 0), read: mbps(rows[3]?.p50 ?? 0) },
    note: "envd on the host (not in a VM): protocol and agent overhead only",
  });
} finally {
  await env.stop();
}
