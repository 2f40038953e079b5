import * as dnsPacket from "dns-packet";
import type { DomainPattern } from "../../shared/domain-patterns.js";
import { matchesDomain, normalizeHostName } from "../../shared/domain-patterns.js";

/** Longest a name's answer is kept by the guest: a policy change reaches its cache soon. */
const MAX_TTL_S = 30;
/** Queries larger than this are not DNS a stub resolver sends. */
export const MAX_QUERY_BYTES = 4096;

/** IPv4 addresses a name may be answered with (already filtered by the gate's limits). */
export type AnswerAddresses = (name: string) => Promise<readonly string[]>;

/**
 * The answer the slot's DNS gate gives one query (UDP or TCP payload; undefined: drop it).
 * While a domain allow-list is set, DNS answers only the names it allows: A queries with
 * the addresses Warren resolves (those the guest may reach), AAAA and other types of an
 * allowed name with no records (the guest has no IPv6), every other name NXDOMAIN. So a
 * guest cannot look up what it may not reach, nor carry data out through queries to a
 * resolver of its choosing (the gate answers every query the guest sends to port 53).
 */
export async function answerQuery(
  query: Buffer,
  domains: readonly DomainPattern[],
  addressesOf: AnswerAddresses,
): Promise<Buffer | undefined> {
  if (query.length > MAX_QUERY_BYTES) return undefined;
  let packet: dnsPacket.Packet;
  try {
    packet = dnsPacket.decode(query);
  } catch {
    return undefined;
  }
  if (packet.type !== "query") return undefined;
  const question = packet.questions?.[0];
  const base = {
    type: "response" as const,
    id: packet.id ?? 0,
    // RD copied, RA set: a recursive resolver as far as the guest can tell.
    flags: ((packet.flags ?? 0) & dnsPacket.RECURSION_DESIRED) | dnsPacket.RECURSION_AVAILABLE,
    questions: question ? [question] : [],
  };
  if (!question || packet.questions?.length !== 1 || question.class !== "IN") {
    return dnsPacket.encode({ ...base, flags: base.flags | rcode("FORMERR") });
  }
  if (!matchesDomain(question.name, domains)) {
    return dnsPacket.encode({ ...base, flags: base.flags | rcode("NXDOMAIN") });
  }
  if (question.type !== "A") return dnsPacket.encode({ ...base, answers: [] });
  const name = normalizeHostName(question.name) as string; // matched: a host name
  const addresses = await addressesOf(name).catch(() => undefined);
  if (addresses === undefined) {
    return dnsPacket.encode({ ...base, flags: base.flags | rcode("SERVFAIL") });
  }
  return dnsPacket.encode({
    ...base,
    answers: addresses.map((data) => ({
      type: "A" as const,
      name: question.name,
      class: "IN" as const,
      ttl: MAX_TTL_S,
      data,
    })),
  });
}

function rcode(name: "FORMERR" | "SERVFAIL" | "NXDOMAIN"): number {
  return { FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3 }[name];
}
