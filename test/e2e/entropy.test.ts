// Fresh randomness per clone through the real e2b SDK against a real server and
// VMs: sandboxes restored from one template, and fork children, each read their own bytes.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Sandbox } from "e2b";
import { useServer } from "../helpers/server.js";
import { sharedBlocks, URANDOM_BLOCKS, urandomBlocks } from "../helpers/urandom.js";

useServer();

/** The sandbox's first command: 512 blocks of its kernel's CRNG (helpers/urandom.ts). */
async function urandom(sandbox: Sandbox): Promise<Set<string>> {
  return urandomBlocks((await sandbox.commands.run(URANDOM_BLOCKS)).stdout);
}

function children(results: (Sandbox | Error)[]): Sandbox[] {
  for (const result of results) if (result instanceof Error) throw result;
  return results as Sandbox[];
}

/**
 * Runs in the source through the agent drive's Node (envd's own runtime and addon): its
 * OpenSSL state is taken before the fork, then each child reads crypto.randomBytes before and
 * after reseedOpenssl(), and a randomUUID() (Node serves those from a cache of 128).
 */
const OPENSSL_PROBE = `
const fs = require("node:fs");
const crypto = require("node:crypto");
const { reseedOpenssl } = require("/.warren/envd/build/Release/system.node");
crypto.randomBytes(16);
crypto.randomUUID();
fs.writeFileSync("/tmp/probe-ready", "");
fs.readFileSync("/tmp/probe-go"); // a FIFO: blocks until a child writes to it
const before = crypto.randomBytes(16).toString("hex");
const reseeded = reseedOpenssl();
const after = crypto.randomBytes(16).toString("hex");
const uuid = crypto.randomUUID();
fs.writeFileSync("/tmp/probe-out.tmp", JSON.stringify({ before, reseeded, after, uuid }));
fs.renameSync("/tmp/probe-out.tmp", "/tmp/probe-out");
`;
const AGENT_NODE =
  "/.warren/lib/ld-linux-x86-64.so.2 --library-path /.warren/lib /.warren/bin/node";

describe("entropy", () => {
  it("two sandboxes created from one template read different /dev/urandom right after create", async () => {
    const made = await Promise.all([Sandbox.create(), Sandbox.create()]);
    try {
      const [a, b] = (await Promise.all(made.map(urandom))) as [Set<string>, Set<string>];
      assert.equal(sharedBlocks(a, b), 0, "no block in common: two independent CRNGs");
    } finally {
      await Promise.all(made.map((s) => s.kill()));
    }
  });

  it("two fork children of one source read different /dev/urandom right after the fork", async () => {
    const source = await Sandbox.create();
    const made: Sandbox[] = [];
    try {
      made.push(...children(await source.fork({ count: 2 })));
      const [a, b, own] = (await Promise.all([...made, source].map(urandom))) as [
        Set<string>,
        Set<string>,
        Set<string>,
      ];
      assert.equal(sharedBlocks(a, b), 0, "the children share no block");
      assert.equal(sharedBlocks(a, own) + sharedBlocks(b, own), 0, "nor with their source");
    } finally {
      await Promise.all([source, ...made].map((s) => s.kill()));
    }
  });

  it("the guest's hwrng is the VMM's virtio-rng", async () => {
    const sandbox = await Sandbox.create();
    try {
      const out = await sandbox.commands.run(
        "cat /sys/class/misc/hw_random/rng_current; head -c 16 /dev/hwrng | wc -c",
        { user: "root" },
      );
      assert.match(out.stdout, /^virtio_rng\.\d+\n16\n$/);
    } finally {
      await sandbox.kill();
    }
  });

  it("a process running at fork time repeats its OpenSSL output in every child until reseedOpenssl()", async () => {
    const source = await Sandbox.create();
    const made: Sandbox[] = [];
    try {
      await source.files.write("/tmp/probe.cjs", OPENSSL_PROBE);
      await source.commands.run("mkfifo -m 666 /tmp/probe-go");
      await source.commands.run(`${AGENT_NODE} /tmp/probe.cjs`, {
        background: true,
        timeoutMs: 0,
      });
      await source.commands.run(
        "for i in $(seq 600); do [ -e /tmp/probe-ready ] && exit 0; sleep 0.1; done; exit 1",
      );
      made.push(...children(await source.fork({ count: 2 })));
      const outputs = await Promise.all(
        made.map(async (child) => {
          const out = await child.commands.run(
            "echo go > /tmp/probe-go; for i in $(seq 300); do [ -e /tmp/probe-out ] && exec cat /tmp/probe-out; sleep 0.1; done; exit 1",
          );
          return JSON.parse(out.stdout) as {
            before: string;
            reseeded: boolean;
            after: string;
            uuid: string;
          };
        }),
      );
      const [a, b] = outputs as [(typeof outputs)[0], (typeof outputs)[0]];
      // The kernel of each child was reseeded by /init; a process's own DRBG was not.
      assert.equal(a.before, b.before, "the cloned OpenSSL state repeats");
      assert.equal(a.reseeded && b.reseeded, true);
      assert.notEqual(a.after, b.after, "reseeded from each child's kernel");
      // Why envd must not take unique values from randomUUID()'s cache (or Math.random).
      assert.equal(a.uuid, b.uuid, "Node's UUID cache repeats whatever the reseed");
    } finally {
      await Promise.all([source, ...made].map((s) => s.kill()));
    }
  });
});
