import pino from "pino";
import { type NodeServer, startNodeServer } from "../../src/server/node-server.js";
import { loadConfig } from "../../src/shared/config.js";
import { FakeDiskChains } from "../../test/fakes/fake-disk-chains.js";
import { FakeGuestAgent } from "../../test/fakes/fake-guest-agent.js";
import { fakeGuestImages } from "../../test/fakes/fake-images.js";
import { FakeSlotPool } from "../../test/fakes/fake-slot-pool.js";
import { FakeVmmDriver } from "../../test/fakes/fake-vmm-driver.js";

interface SimulatedNode {
  readonly id: string;
  readonly dataDir: string;
  readonly tlsDir: string;
}

/** Slots a simulated node may hand out: FakeSlot's host addresses have room for 65 535. */
const MAX_SLOTS = 60_000;

async function startSimulatedNode(node: SimulatedNode): Promise<NodeServer> {
  const config = loadConfig(
    {},
    {
      ...process.env,
      WARREN_NODE_ID: node.id,
      WARREN_HOME: node.dataDir,
      WARREN_HOST: "127.0.0.1",
      WARREN_PORT: "0",
      WARREN_CLUSTER_HOST: "127.0.0.1",
      WARREN_CLUSTER_PORT: "0",
      WARREN_CLUSTER_TLS_DIR: node.tlsDir,
    },
  );
  const images = await fakeGuestImages(node.dataDir, "simulated");
  const driver = new FakeVmmDriver();
  const slots = new FakeSlotPool(MAX_SLOTS);
  const logger = pino({ level: config.logLevel, base: { node: node.id } }, pino.destination(2));
  const server = await startNodeServer(config, logger, {
    simulatedForBenchmarks: {
      images,
      driver,
      disks: new FakeDiskChains(),
      slots,
      agent: new FakeGuestAgent(driver, slots),
    },
  });
  await server.ready;
  return server;
}

const nodes = JSON.parse(process.env.WARREN_BENCH_SIM_NODES ?? "[]") as SimulatedNode[];
const servers: NodeServer[] = [];
for (const node of nodes) {
  const server = await startSimulatedNode(node);
  servers.push(server);
  process.stdout.write(`${JSON.stringify({ id: node.id, url: server.url })}\n`);
}

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  // Detached, not paused: a simulated VM holds nothing worth capturing, and the bench's
  // PostgreSQL and data dirs go with the run.
  await Promise.allSettled(servers.map((server) => server.close({ onStop: "detach" })));
  process.exit(0);
}
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
