// The GuestAgent contract on FakeGuestAgent, the agent the orchestrator's unit tests run on:
// its guests are FakeVmmDriver's, found behind FakeSlotPool's host addresses. EnvdClient's
// run, against the real envd: test/e2e/agent/guest-agent-contract.test.ts.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { guestAgentContract } from "../../contracts/guest-agent.contract.js";
import { FakeGuestAgent } from "../../fakes/fake-guest-agent.js";
import { FakeSlotPool } from "../../fakes/fake-slot-pool.js";
import { FakeVmmDriver, fakeVmSpec } from "../../fakes/fake-vmm-driver.js";

guestAgentContract("FakeGuestAgent", async () => {
  const work = await mkdtemp(join(tmpdir(), "warren-fake-agent-"));
  const driver = new FakeVmmDriver();
  const slots = new FakeSlotPool();
  let guests = 0;
  return {
    agent: new FakeGuestAgent(driver, slots),
    async guest() {
      const slot = await slots.acquire();
      await driver.boot(fakeVmSpec(`g${++guests}`, slot, join(work, "run")));
      return slot.hostAddress;
    },
    silentHost: async () => (await slots.acquire()).hostAddress,
    async cleanup() {
      for (const vm of [...driver.alive]) await vm.destroy();
      await slots.close();
      await rm(work, { recursive: true, force: true });
    },
  };
});
