import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { after, before, test } from "node:test";
import {
  NetnsSlotPool,
  NetworkError,
  type RunCommand,
  runCommand,
} from "../../../src/network/index.js";
import { leakCheck, removeLeftovers } from "../../helpers/leak-check.js";
import { TAP_OWNER } from "../../helpers/network/fake-guest.js";
import { fixtureLink, runPoolOptions } from "../../helpers/run-env.js";

// A slot whose creation fails half-way leaves nothing behind. Failures are injected into
// each command of a creation: before it runs, after running half of its input, and after
// it has run in full.

/**
 * The slots' egress interface: a veth of the run's (its peer beside it), forwarding already
 * (so that no pool turns forwarding on for a host interface and leaves its guard there).
 */
const EGRESS = fixtureLink("egress");
const EGRESS_PEER = fixtureLink("egpeer");

before(async () => {
  await removeLeftovers();
  await runCommand("ip", ["link", "add", EGRESS, "type", "veth", "peer", "name", EGRESS_PEER]);
  await writeFile(`/proc/sys/net/ipv4/conf/${EGRESS}/forwarding`, "1\n");
});

after(async () => {
  await runCommand("ip", ["link", "del", EGRESS]);
  assert.deepEqual(await leakCheck(), []);
});

/** What a slot left behind: the leak check's list, but the egress interface. */
async function leftovers(): Promise<string[]> {
  const egress = [`link ${EGRESS}`, `link ${EGRESS_PEER}`];
  return (await leakCheck()).filter((leak) => !egress.includes(leak));
}

/** The failing command: does not run, runs half of its input, or runs fully, then fails. */
type Mode = "before" | "half" | "after";

/**
 * Runs commands for real, except, once armed, the first whose command line is `failing`
 * (some steps run in parallel, so a step is named by its command, not its position).
 */
function faultyRunner(failing: string, mode: Mode) {
  let armed = false;
  let failed = false;
  const commands: string[] = [];
  const runner: RunCommand = async (file, args, options) => {
    if (!armed) return runCommand(file, args, options);
    const line = [file, ...args].join(" ");
    commands.push(line);
    const fail = !failed && line === failing;
    if (fail) failed = true;
    if (fail && mode === "before") throw injected(file, args);
    if (fail && mode === "half") {
      // Only the first half of its input runs (an `ip -batch` that stops half-way; an
      // iptables-restore without COMMIT, which changes nothing).
      const input = (options?.input ?? "").split("\n").filter(Boolean);
      const half = `${input.slice(0, Math.ceil(input.length / 2)).join("\n")}\n`;
      await runCommand(file, args, { input: half }).catch(() => {});
      throw injected(file, args);
    }
    const result = await runCommand(file, args, options);
    if (fail) throw injected(file, args);
    return result;
  };
  return {
    runner,
    commands,
    arm() {
      armed = true;
    },
  };
}

function injected(file: string, args: readonly string[]): NetworkError {
  return new NetworkError("injected failure", [file, ...args], "injected", 1);
}

/** Commands a successful slot creation runs. */
async function creationCommands(): Promise<string[]> {
  const probe = faultyRunner("", "before");
  const pool = new NetnsSlotPool({
    ...runPoolOptions(),
    size: 0,
    tapOwner: TAP_OWNER,
    egressInterface: EGRESS,
    runner: probe.runner,
  });
  await pool.start();
  probe.arm();
  await pool.acquire();
  const commands = [...probe.commands];
  await pool.close();
  return commands;
}

test("a creation that fails at any step removes what it created", async (t) => {
  const steps = await creationCommands();
  t.diagnostic(`a creation runs ${steps.length} commands: ${steps.join(" | ")}`);
  assert.ok(steps.length >= 4);
  for (const step of steps) {
    for (const mode of ["before", "half", "after"] as const) {
      const faulty = faultyRunner(step, mode);
      const pool = new NetnsSlotPool({
        ...runPoolOptions(),
        size: 0,
        tapOwner: TAP_OWNER,
        egressInterface: EGRESS,
        runner: faulty.runner,
      });
      await pool.start();
      faulty.arm();
      await assert.rejects(pool.acquire(), (err: unknown) => {
        assert.ok(err instanceof NetworkError, String(err));
        assert.equal(err.stderr, "injected");
        return true;
      });
      assert.deepEqual(await leftovers(), [], `leftovers after a failure ${mode} ${step}`);
      assert.deepEqual(pool.stats, { idle: 0, inUse: 0, total: 0 });
      // The slot's names are free again: the next creation succeeds.
      const slot = await pool.acquire();
      assert.equal(slot.index, 1);
      await pool.close();
    }
  }
});

test("a real command failure names the command and carries its stderr", async () => {
  // The last step (host rules) really fails: iptables-restore is given a flag it refuses.
  const runner: RunCommand = (file, args, options) =>
    file === "iptables-restore" && args.includes("--noflush")
      ? runCommand(file, ["--no-such-flag", ...args], options)
      : runCommand(file, args, options);
  const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0, egressInterface: EGRESS, runner });
  await assert.rejects(pool.acquire(), (err: unknown) => {
    assert.ok(err instanceof NetworkError, String(err));
    assert.equal(err.kind, "internal");
    assert.deepEqual(err.command.slice(0, 2), ["iptables-restore", "--no-such-flag"]);
    assert.match(err.stderr, /unrecognized option/);
    assert.match(err.message, /iptables-restore --no-such-flag .* exited with 1: /);
    return true;
  });
  assert.deepEqual(await leftovers(), []);
  await pool.close();
  assert.throws(() => new NetnsSlotPool({ egressInterface: "no such if" }), /egressInterface/);
});
