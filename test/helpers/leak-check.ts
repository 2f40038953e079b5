import { readdir, readFile } from "node:fs/promises";
import { runCommand } from "../../src/network/index.js";

// What network tests may leave behind, by name: slot namespaces (`warren-<n>`) and the
// tests' own (`warren-fakeguest-<n>`, `warren-fakenet`), host veths (`wv<n>`, `wfake*`),
// and host iptables rules carrying a `warren` comment.
const NETNS = /^warren-/;
const LINK = /^(wv[0-9]+|wfake)/;
const RULE = /--comment "?warren/;

interface Leftovers {
  netns: string[];
  links: string[];
  /** [table, iptables-save line] */
  rules: [string, string][];
}

async function findLeftovers(): Promise<Leftovers> {
  const netns = (await readdir("/run/netns").catch(() => [])).filter((n) => NETNS.test(n));
  const links = (await readdir("/sys/class/net")).filter((l) => LINK.test(l));
  const { stdout } = await runCommand("iptables-save", []);
  const rules: [string, string][] = [];
  let table = "";
  for (const line of stdout.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1);
    if (line.startsWith("-A ") && RULE.test(line)) rules.push([table, line]);
  }
  return { netns, links, rules };
}

/** Lists every leftover, one string each; [] when the host is clean. */
export async function leakCheck(): Promise<string[]> {
  const found = await findLeftovers();
  return [
    ...found.netns.map((n) => `netns ${n}`),
    ...found.links.map((l) => `link ${l}`),
    ...found.rules.map(([table, line]) => `iptables -t ${table} ${line}`),
  ];
}

/** Removes leftovers of an earlier, interrupted run; returns what it removed. */
export async function removeLeftovers(): Promise<string[]> {
  const leftovers = await leakCheck();
  const found = await findLeftovers();
  const batch = [
    ...found.links.map((l) => `link del ${l}`),
    ...found.netns.map((n) => `netns del ${n}`),
  ];
  if (batch.length > 0) {
    await runCommand("ip", ["-force", "-batch", "-"], { input: `${batch.join("\n")}\n` }).catch(
      () => {},
    );
  }
  for (const [table, line] of found.rules) {
    await runCommand("iptables", ["-t", table, "-D", ...splitRule(line.slice(3))]).catch(() => {});
  }
  return leftovers;
}

/** Splits an iptables-save rule into arguments (comments are the only quoted parts). */
function splitRule(text: string): string[] {
  return [...text.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? "");
}

/** QEMU processes whose command line points into `runDir`, and entries left in it. */
export async function vmLeftovers(runDir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (cmdline.split("\0")[0]?.includes("qemu-system") && cmdline.includes(`${runDir}/`)) {
      found.push(`qemu pid ${entry}`);
    }
  }
  for (const name of await readdir(runDir).catch(() => [] as string[])) {
    found.push(`runtime dir ${runDir}/${name}`);
  }
  return found;
}
