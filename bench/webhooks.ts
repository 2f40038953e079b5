// Webhook delivery latency: sandboxes created and killed one after another through the SDK,
// each lifecycle event delivered to a receiver on the fake net (the services process's POST,
// signed); per delivery, the time from the event's own timestamp to the receiver reading it.
// Checks order per sandbox and every signature. Run: npm run bench:webhooks (as root).
// BENCH_SANDBOXES (default 20).
import { Sandbox } from "e2b";
import { webhookSignature } from "../src/events/index.js";
import { FAKENET, FakeNet } from "../test/helpers/network/fake-net.js";
import { api, startServer } from "../test/helpers/server.js";
import { report, summarize } from "./lib/report.js";

const SANDBOXES = Number(process.env.BENCH_SANDBOXES ?? 20);
const NET_PORT = 9290;
const RECEIVER = `${FAKENET.public1}:${FakeNet.httpPort(NET_PORT)}`;
const SECRET = "bench-webhook-secret";

const net = await FakeNet.start(NET_PORT);
const server = await startServer({ WARREN_WEBHOOK_PRIVATE_HOSTS: RECEIVER });
try {
  const made = await api(server, "POST", "/events/webhooks", {
    name: "bench",
    url: `http://${RECEIVER}/hook`,
    events: ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"],
    signatureSecret: SECRET,
  });
  if (made.status !== 201) throw new Error(`webhook: ${made.status} ${JSON.stringify(made.body)}`);
  await net.agent.seen();
  const started = Date.now();
  for (let i = 0; i < SANDBOXES; i++) {
    const sandbox = await Sandbox.create();
    await sandbox.kill();
  }
  const received: { headers: Record<string, string>; body?: string; at?: number }[] = [];
  const deadline = Date.now() + 120_000;
  while (received.length < 2 * SANDBOXES && Date.now() < deadline) {
    received.push(...(await net.agent.seen()));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const latencies: number[] = [];
  const order = new Map<string, string[]>();
  let badSignatures = 0;
  for (const delivery of received) {
    const body = JSON.parse(delivery.body ?? "{}") as {
      type: string;
      timestamp: string;
      sandbox_id: string;
    };
    if (delivery.headers["e2b-signature"] !== webhookSignature(SECRET, delivery.body ?? "")) {
      badSignatures += 1;
    }
    latencies.push((delivery.at ?? Date.now()) - Date.parse(body.timestamp));
    order.set(body.sandbox_id, [...(order.get(body.sandbox_id) ?? []), body.type]);
  }
  const outOfOrder = [...order.values()].filter(
    (types) => types.join() !== "sandbox.lifecycle.created,sandbox.lifecycle.killed",
  ).length;
  report("webhooks", [summarize("event → receiver", "ms", latencies)], {
    sandboxes: SANDBOXES,
    expected: 2 * SANDBOXES,
    received: received.length,
    outOfOrder,
    badSignatures,
    wallMs: Date.now() - started,
  });
} finally {
  await server.stop();
  await net.close();
}
