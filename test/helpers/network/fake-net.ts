import { writeFile } from "node:fs/promises";
import { runCommand } from "../../../src/network/index.js";
import { fixtureLink, fixtureNetns } from "../run-env.js";
import { NetnsAgent } from "./netns-agent.js";

/**
 * A stand-in for the host's LAN and, behind a router on it, the internet: namespace
 * `<prefix>-fakenet` behind veth `<prefix>fakenet` on the host (the run's network prefix:
 * see run-env.ts). The link is the LAN, 198.51.100.128/25: the host's address (.254), the
 * router (.129) and another LAN host (.130). Behind the router: public-looking (TEST-NET-2,
 * 198.51.100.0/25) and private addresses. A NetnsAgent listens on `port` on all of them
 * (a greeter, then an echo), and answers HTTP on `port + 1` (`FakeNet.httpPort`).
 * Slots under test use that veth as their egress interface, so guest traffic never leaves
 * this machine. The test command keeps runs' blocks clear of these addresses.
 */
export const FAKENET = {
  netns: fixtureNetns("fakenet"),
  hostVeth: fixtureLink("fakenet"),
  /** The host's own address on the fake net: a host address in a public range. */
  hostAddress: "198.51.100.254",
  /** The router between the LAN and the fake internet. */
  router: "198.51.100.129",
  /** Another host on the LAN: in a public range, but the host's own network. */
  lan1: "198.51.100.130",
  public1: "198.51.100.1",
  public2: "198.51.100.2",
  /** A private address (192.168/16), routed by the host to the fake net. */
  private1: "192.168.77.1",
} as const;

export class FakeNet {
  readonly agent: NetnsAgent;

  private constructor(agent: NetnsAgent) {
    this.agent = agent;
  }

  static async start(port: number): Promise<FakeNet> {
    const { netns, hostVeth, hostAddress, router, lan1, public1, public2, private1 } = FAKENET;
    await runCommand("ip", ["-batch", "-"], {
      input: [
        `netns add ${netns}`,
        `link add ${hostVeth} type veth peer name eth0 netns ${netns}`,
        `addr add ${hostAddress}/25 dev ${hostVeth}`,
        `link set ${hostVeth} up`,
        `route add 198.51.100.0/25 via ${router} dev ${hostVeth}`,
        `route add 192.168.77.0/24 via ${router} dev ${hostVeth}`,
        "",
      ].join("\n"),
    });
    try {
      // A LAN interface that forwards already (as the host's would where Warren runs), so
      // that no pool turns forwarding on for it and leaves a guard rule naming it behind.
      await writeFile(`/proc/sys/net/ipv4/conf/${hostVeth}/forwarding`, "1\n");
      await runCommand("ip", ["-n", netns, "-batch", "-"], {
        input: [
          "link set lo up",
          `addr add ${router}/25 dev eth0`,
          `addr add ${lan1}/25 dev eth0`,
          `addr add ${public1}/32 dev eth0`,
          `addr add ${public2}/32 dev eth0`,
          `addr add ${private1}/32 dev eth0`,
          "link set eth0 up",
          `route add default via ${hostAddress}`,
          "",
        ].join("\n"),
      });
      const agent = await NetnsAgent.start(`/run/netns/${netns}`);
      for (const listening of [
        await agent.listen(port, "fakenet"),
        await agent.listenHttp(FakeNet.httpPort(port), "fakenet"),
      ]) {
        if (!listening.ok) throw new Error(`fake net listener: ${listening.error}`);
      }
      return new FakeNet(agent);
    } catch (err) {
      await removeFakeNet();
      throw err;
    }
  }

  /** Where the fake net started on `port` answers HTTP. */
  static httpPort(port: number): number {
    return port + 1;
  }

  async close(): Promise<void> {
    await this.agent.close();
    await removeFakeNet();
  }
}

async function removeFakeNet(): Promise<void> {
  await runCommand("ip", ["-force", "-batch", "-"], {
    input: `link del ${FAKENET.hostVeth}\nnetns del ${FAKENET.netns}\n`,
  });
}
