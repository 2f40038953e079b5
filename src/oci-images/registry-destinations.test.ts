import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { nonPublicAddress } from "../shared/public-address.js";
import { pullImage } from "./pull-image.js";

/**
 * Where a pull may go. A registry named by a caller, its token realm and every redirect must
 * be a public address over HTTPS; only registries the operator listed (mirrors, insecure and
 * private registries) may be on loopback or private addresses. A "victim" server on loopback
 * counts every connection made to it: a refusal must come before any.
 */

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

let victimHits = 0;
const victim = createServer((_req, res) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ token: "from-the-victim" }));
});
victim.on("connection", () => victimHits++);
let victimHost = "";
let victimPort = 0;

/** A registry the operator listed as insecure, answering each repository with one trick. */
let registryHost = "";
const registry = createServer((req, res) => {
  const repository = /^\/v2\/([^/]+)\/app\//.exec(req.url ?? "")?.[1];
  const challenge = (realm: string) => {
    res.writeHead(401, { "www-authenticate": `Bearer realm="${realm}",service="x"` });
    res.end();
  };
  const redirect = (location: string) => {
    res.writeHead(302, { location });
    res.end();
  };
  switch (repository) {
    case "realm-ip":
      return challenge(`http://${victimHost}/token`);
    case "realm-name":
      return challenge(`https://localhost:${victimPort}/token`);
    case "realm-http":
      return challenge("http://registry.example/token");
    case "redirect-ip":
      return redirect(`http://${victimHost}/v2/app/manifests/1`);
    case "redirect-name":
      return redirect(`https://localhost:${victimPort}/v2/app/manifests/1`);
    case "loop":
      return redirect(`http://${registryHost}/v2/loop/app/manifests/1`);
    default:
      res.writeHead(404);
      res.end();
  }
});

let cacheDir: string;
before(async () => {
  victimHost = await listen(victim);
  victimPort = Number(victimHost.split(":")[1]);
  registryHost = await listen(registry);
  cacheDir = await mkdtemp(join(tmpdir(), "warren-destinations-"));
});
after(async () => {
  victim.closeAllConnections();
  registry.closeAllConnections();
  await new Promise((resolve) => victim.close(resolve));
  await new Promise((resolve) => registry.close(resolve));
  await rm(cacheDir, { recursive: true, force: true });
});

const pull = (reference: string) =>
  pullImage({ reference, cacheDir, insecureRegistries: [registryHost] });

async function refused(reference: string, pattern: RegExp): Promise<void> {
  const hits = victimHits;
  await assert.rejects(
    pull(reference),
    (err: Error & { reason?: string }) => {
      assert.equal(err.reason, "image_pull_failed", err.message);
      assert.match(err.message, pattern);
      return true;
    },
    reference,
  );
  assert.equal(victimHits, hits, `${reference}: nothing reached the loopback server`);
}

it("refuses a token realm on a loopback address, by IP or by a name resolving there", async () => {
  await refused(`${registryHost}/realm-ip/app:1`, /token realm .*127\.0\.0\.1.* loopback/);
  await refused(`${registryHost}/realm-name/app:1`, /localhost resolves to .*loopback/);
});

it("refuses a token realm over plain HTTP", async () => {
  await refused(`${registryHost}/realm-http/app:1`, /registry\.example.* plain HTTP/);
});

it("refuses redirects to loopback, and a redirect loop after a bounded number of hops", async () => {
  await refused(`${registryHost}/redirect-ip/app:1`, /redirect .*127\.0\.0\.1.* loopback/);
  await refused(`${registryHost}/redirect-name/app:1`, /localhost resolves to .*loopback/);
  await refused(`${registryHost}/loop/app:1`, /more than 5 redirects/);
});

it("refuses a registry named by the caller on a loopback address, saying what to list", async () => {
  await refused(
    `${victimHost}/app:1`,
    /127\.0\.0\.1 is a loopback address.*WARREN_PRIVATE_REGISTRIES/,
  );
  await refused(`localhost:${victimPort}/app:1`, /localhost resolves to 127\.0\.0\.1, a loopback/);
});

it("classifies addresses: loopback, private, link-local and other non-public ranges", () => {
  const cases: [string, string | undefined][] = [
    ["127.0.0.1", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "link-local"],
    ["100.64.0.1", "shared (carrier-grade NAT)"],
    ["0.0.0.0", "unspecified"],
    ["224.0.0.1", "multicast"],
    ["255.255.255.255", "reserved"],
    ["::1", "loopback"],
    ["::", "unspecified"],
    ["fe80::1", "link-local"],
    ["fd00::1", "private"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:a9fe:a9fe", "link-local"],
    ["64:ff9b::a9fe:a9fe", "link-local"],
    ["8.8.8.8", undefined],
    ["172.32.0.1", undefined],
    ["2a00:1450:4001:80b::200e", undefined],
  ];
  for (const [address, kind] of cases) {
    assert.equal(nonPublicAddress(address), kind, address);
  }
});
