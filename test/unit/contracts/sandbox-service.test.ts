// The SandboxService contract on the orchestrator, on fakes (no VMs, no root): as the unit
// tier's other tests see it (no warm pools), and with demand-sized pools per template. Then
// on InMemorySandboxService, the API tests' stand-in, which must answer as the orchestrator
// does.
import { sandboxServiceContract } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { InMemorySandboxService } from "../../fakes/in-memory-sandbox-service.js";

sandboxServiceContract("Orchestrator on fakes", async () => (await FakeNode.start()).harness());

sandboxServiceContract("Orchestrator on fakes, with warm pools per template", async () =>
  (await FakeNode.start({ poolSize: 1, pool: { maxPerTemplate: 4, refillDelayMs: 0 } })).harness(),
);

sandboxServiceContract("InMemorySandboxService (the API tests' stand-in)", async () => {
  const service = new InMemorySandboxService({ maxSandboxes: 3, maxForkCount: 4 });
  return {
    service,
    templateId: "base",
    maxSandboxes: 3,
    maxForkCount: 4,
    cleanup: async () => {
      for (const sandbox of service.list({})) await service.kill(sandbox.sandboxId);
    },
  };
});
