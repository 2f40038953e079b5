// The API tests' stand-in must answer as the orchestrator does: the same contract.
import { sandboxServiceContract } from "../../../src/orchestrator/sandbox-service.contract.js";
import { InMemorySandboxService } from "./in-memory-sandbox-service.js";

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
