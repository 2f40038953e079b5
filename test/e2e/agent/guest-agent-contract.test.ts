// The GuestAgent contract on EnvdGuestAgent, the orchestrator's client, against the real envd
// (the bundle that goes into guests) run on the host: each guest an envd of its own on a
// loopback address of its own, on envd's port, as a guest's answers the host. The fake's
// run: test/unit/contracts/guest-agent.test.ts.
import { EnvdGuestAgent } from "../../../src/orchestrator/index.js";
import { guestAgentContract } from "../../contracts/guest-agent.contract.js";
import { type RunningEnvd, startEnvd } from "../../helpers/envd.js";

/** A loopback address no other test picks (127.0.0.0/8 is all local on Linux). */
function randomLoopback(): string {
  const byte = () => 1 + Math.floor(Math.random() * 254);
  return `127.${byte()}.${byte()}.${byte()}`;
}

guestAgentContract("EnvdGuestAgent (real envd)", async () => {
  const started: RunningEnvd[] = [];
  return {
    agent: new EnvdGuestAgent(),
    async guest() {
      const address = randomLoopback();
      started.push(await startEnvd({ address }));
      return address;
    },
    silentHost: async () => randomLoopback(),
    async cleanup() {
      for (const envd of started) await envd.stop();
    },
  };
});
