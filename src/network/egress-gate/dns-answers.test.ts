import assert from "node:assert/strict";
import { describe, it } from "node:test";
import * as dnsPacket from "dns-packet";
import { parseDomainPattern } from "../../shared/domain-patterns.js";
import { answerQuery } from "./dns-answers.js";

const domains = ["*.allowed.test"].map((e) => parseDomainPattern(e) ?? assert.fail(e));
const addressesOf = async (name: string) => (name === "api.allowed.test" ? ["198.51.100.1"] : []);

function query(name: string, type: "A" | "AAAA" | "TXT" = "A", id = 7): Buffer {
  return dnsPacket.encode({
    type: "query",
    id,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ type, name, class: "IN" }],
  });
}

/** The decoded answer; `rcode` is decoded but not in the package's types. */
async function ask(packet: Buffer) {
  const answer = await answerQuery(packet, domains, addressesOf);
  return answer && (dnsPacket.decode(answer) as dnsPacket.DecodedPacket & { rcode?: string });
}

describe("the DNS gate's answers", () => {
  it("answers an allowed name's A query with Warren's addresses, short-lived", async () => {
    const answer = await ask(query("API.allowed.test", "A", 4242));
    assert.equal(answer?.id, 4242);
    assert.equal(answer?.rcode, "NOERROR");
    assert.deepEqual(
      answer?.answers?.map((a) => [
        a.type,
        "data" in a ? a.data : undefined,
        "ttl" in a ? a.ttl : 0,
      ]),
      [["A", "198.51.100.1", 30]],
    );
  });

  it("NXDOMAIN for every name the list does not allow, no records for other types", async () => {
    for (const name of ["denied.test", "allowed.test", "api.allowed.test.evil"]) {
      const answer = await ask(query(name));
      assert.equal(answer?.rcode, "NXDOMAIN", name);
      assert.deepEqual(answer?.answers, []);
    }
    const txt = await ask(query("exfil.allowed.test", "TXT"));
    assert.equal(txt?.rcode, "NOERROR");
    assert.deepEqual(txt?.answers, []);
    assert.deepEqual((await ask(query("api.allowed.test", "AAAA")))?.answers, []);
  });

  it("drops what is not a query, FORMERR for several questions", async () => {
    assert.equal(await answerQuery(Buffer.from("not dns"), domains, addressesOf), undefined);
    assert.equal(await answerQuery(Buffer.alloc(5000), domains, addressesOf), undefined);
    const two = dnsPacket.encode({
      type: "query",
      id: 1,
      questions: [
        { type: "A", name: "a.allowed.test", class: "IN" },
        { type: "A", name: "b.allowed.test", class: "IN" },
      ],
    });
    assert.equal((await ask(two))?.rcode, "FORMERR");
  });
});
