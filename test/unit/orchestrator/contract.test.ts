// The orchestrator against the SandboxService contract, on fakes (no VMs, no root).
import { sandboxServiceContract } from "../../../src/orchestrator/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";

sandboxServiceContract("Orchestrator on fakes", async () => (await FakeNode.start()).harness());
