// The orchestrator against the SandboxService contract, on fakes (no VMs, no root): as the
// unit tier's other tests see it (no warm pools), and with demand-sized pools per template.
import { sandboxServiceContract } from "../../../src/orchestrator/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";

sandboxServiceContract("Orchestrator on fakes", async () => (await FakeNode.start()).harness());

sandboxServiceContract("Orchestrator on fakes, with warm pools per template", async () =>
  (await FakeNode.start({ poolSize: 1, pool: { maxPerTemplate: 4, refillDelayMs: 0 } })).harness(),
);
