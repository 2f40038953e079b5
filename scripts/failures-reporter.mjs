// A node:test reporter that writes one line per failed test (file, name, the error's first
// line), beside the TAP on stdout: test.mjs prints them last, so the tail of a long run,
// which is what CI keeps, names what failed.
export default async function* failures(source) {
  for await (const event of source) {
    if (event.type !== "test:fail") continue;
    const { name, file, details } = event.data;
    const error = details?.error;
    // A suite fails because a test in it did: that test has its own line.
    if (error?.failureType === "subtestsFailed") continue;
    const cause = error?.cause ?? error;
    const message = String(cause?.message ?? cause ?? "")
      .split("\n")[0]
      .slice(0, 300);
    yield `${file ?? "?"} › ${name}: ${message}\n`;
  }
}
