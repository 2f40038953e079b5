import assert from "node:assert/strict";
import { test } from "node:test";
import { cidrContains, formatCidr, formatIpv4, parseCidr, parseIpv4 } from "./ipv4.js";

test("parseIpv4 accepts dotted quads and refuses the rest", () => {
  assert.equal(parseIpv4("10.201.0.3"), 0x0ac90003);
  assert.equal(parseIpv4("255.255.255.255"), 0xffffffff);
  for (const bad of [
    "",
    "1.2.3",
    "1.2.3.4.5",
    "256.1.1.1",
    "01.2.3.4",
    "1.2.3.-4",
    "a.b.c.d",
    " 1.2.3.4",
  ]) {
    assert.equal(parseIpv4(bad), undefined, bad);
  }
  assert.equal(formatIpv4(0xc0a80101), "192.168.1.1");
});

test("parseCidr clears host bits and treats an address as a /32", () => {
  assert.equal(formatCidr(parseCidr("10.1.2.3/8") ?? assert.fail()), "10.0.0.0/8");
  assert.equal(formatCidr(parseCidr("203.0.113.7") ?? assert.fail()), "203.0.113.7/32");
  assert.equal(formatCidr(parseCidr("0.0.0.0/0") ?? assert.fail()), "0.0.0.0/0");
  for (const bad of ["10.0.0.0/33", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/-1", "/8", "::1/128"]) {
    assert.equal(parseCidr(bad), undefined, bad);
  }
  const block = parseCidr("172.16.0.0/12") ?? assert.fail();
  assert.ok(cidrContains(block, parseIpv4("172.31.255.255") ?? 0));
  assert.ok(!cidrContains(block, parseIpv4("172.32.0.0") ?? 0));
});
