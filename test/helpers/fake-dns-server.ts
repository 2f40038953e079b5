import { createSocket } from "node:dgram";
import * as dnsPacket from "dns-packet";

/**
 * A DNS server of the tests' own on 127.0.0.1 (a stand-in for the host's resolver, given to
 * Warren as its egress resolver): A records from `answer(name)`, NXDOMAIN where it has none.
 */
export async function startFakeDns(
  answer: (name: string) => string | undefined,
): Promise<{ readonly port: number; close(): void }> {
  const server = createSocket("udp4");
  server.on("message", (query, from) => {
    const packet = dnsPacket.decode(query);
    const question = packet.questions?.[0];
    const name = question?.name.toLowerCase() ?? "";
    const address = question?.type === "A" ? answer(name) : undefined;
    const reply = dnsPacket.encode({
      type: "response",
      id: packet.id ?? 0,
      flags: address || question?.type !== "A" ? 0 : 3, // NXDOMAIN
      questions: question ? [question] : [],
      answers: address ? [{ type: "A", name, class: "IN", ttl: 5, data: address }] : [],
    });
    server.send(reply, from.port, from.address);
  });
  await new Promise<void>((resolve) => server.bind(0, "127.0.0.1", resolve));
  return { port: server.address().port, close: () => server.close() };
}
