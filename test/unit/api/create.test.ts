import assert from "node:assert/strict";
import { test } from "node:test";
import type { CreateSandboxInput } from "../../../src/orchestrator/index.js";
import { errorOf, useApi } from "./api-harness.js";

const MASK = "localhost:${PORT}";

// POST /sandboxes (v1) and POST /v2/sandboxes: body → CreateSandboxInput, and the
// `Sandbox` response the SDK reads.

function lastCreate(service: ReturnType<typeof useApi>["service"]): CreateSandboxInput {
  const calls = service.callsOf("create");
  assert.ok(calls.length > 0, "create was not called");
  return calls.at(-1)?.[0] as CreateSandboxInput;
}

test("v2 with an empty body: E2B's defaults, always secured", async () => {
  const { call, service } = useApi();
  const res = await call("POST", "/v2/sandboxes", { body: {} });
  assert.equal(res.statusCode, 201);
  assert.deepEqual(lastCreate(service), {
    teamId: "default",
    templateId: "base",
    timeoutMs: 300_000,
    metadata: {},
    envVars: {},
    lifecycle: { onTimeout: "kill", autoResume: false },
    network: { allowOut: [], denyOut: [], allowPublicTraffic: true },
    allowInternetAccess: true,
    secure: true,
  });
});

test("v1 with only templateID: not secured, and no envdAccessToken in the response", async () => {
  const { call, service } = useApi({ defaultTimeoutMs: 60_000 });
  service.templates.add("python");
  const res = await call("POST", "/sandboxes", { body: { templateID: "python" } });
  assert.equal(res.statusCode, 201);
  const input = lastCreate(service);
  assert.equal(input.templateId, "python");
  assert.equal(input.secure, false);
  assert.equal(input.timeoutMs, 60_000);
  assert.equal("envdAccessToken" in res.json(), false);

  await call("POST", "/sandboxes", { body: { secure: true } });
  assert.equal(lastCreate(service).secure, true);
});

test("everything the SDK can send is mapped (v2, as e2b 2.51 builds it)", async () => {
  const { call, service } = useApi();
  service.templates.add("my-template");
  const res = await call("POST", "/v2/sandboxes", {
    body: {
      templateID: "my-template",
      metadata: { user: "ann", "a b": "c&d" },
      envVars: { FOO: "1" },
      timeout: 30,
      allow_internet_access: false,
      network: {
        allowOut: ["1.1.1.1"],
        denyOut: ["0.0.0.0/0"],
        allowPublicTraffic: false,
        maskRequestHost: MASK,
      },
      autoPause: true,
      autoResume: { enabled: true },
      mcp: null,
      unknownField: { ignored: true },
    },
  });
  assert.equal(res.statusCode, 201);
  assert.deepEqual(lastCreate(service), {
    teamId: "default",
    templateId: "my-template",
    timeoutMs: 30_000,
    metadata: { user: "ann", "a b": "c&d" },
    envVars: { FOO: "1" },
    lifecycle: { onTimeout: "pause", autoResume: true },
    network: {
      allowOut: ["1.1.1.1"],
      denyOut: ["0.0.0.0/0"],
      allowPublicTraffic: false,
      maskRequestHost: MASK,
    },
    allowInternetAccess: false,
    secure: true,
  });
});

test("the Sandbox response has every field the SDK reads", async () => {
  const { call, service } = useApi({ domain: "sandboxes.example.com" });
  const res = await call("POST", "/v2/sandboxes", {
    body: { network: { allowPublicTraffic: false } },
  });
  const body = res.json();
  const created = [...service.sandboxes.values()].at(-1);
  assert.ok(created);
  assert.deepEqual(body, {
    sandboxID: created.sandboxId,
    templateID: "base",
    clientID: "warren",
    envdVersion: "0.6.4",
    volumeMounts: [],
    envdAccessToken: "envd-token",
    trafficAccessToken: "traffic-token",
    domain: "sandboxes.example.com",
    state: "running",
    startedAt: created.startedAt.toISOString(),
    endAt: created.endAt.toISOString(),
    cpuCount: created.cpuCount,
    memoryMB: created.memoryMiB,
    diskSizeMB: created.diskSizeMiB,
    metadata: { ...created.metadata },
  });

  const plain = (await useApi().call("POST", "/v2/sandboxes", { body: {} })).json();
  assert.equal(plain.trafficAccessToken, null);
  assert.equal(plain.domain, null);
  assert.match(plain.envdVersion, /^\d+\.\d+\.\d+$/);
});

test("autoPause false / absent means kill on timeout", async () => {
  const { call, service } = useApi();
  await call("POST", "/v2/sandboxes", { body: { autoPause: false } });
  assert.deepEqual(lastCreate(service).lifecycle, { onTimeout: "kill", autoResume: false });
  await call("POST", "/v2/sandboxes", { body: { autoPause: true } });
  assert.deepEqual(lastCreate(service).lifecycle, { onTimeout: "pause", autoResume: false });
});

test("timeout: seconds → ms, an integer from 0 (E2B's minimum) to the maximum", async () => {
  const { call, service } = useApi({ maxTimeoutMs: 3_600_000 });
  await call("POST", "/v2/sandboxes", { body: { timeout: 3600 } });
  assert.equal(lastCreate(service).timeoutMs, 3_600_000);
  assert.equal((await call("POST", "/v2/sandboxes", { body: { timeout: 0 } })).statusCode, 201);
  assert.equal(lastCreate(service).timeoutMs, 0);

  const cases: [unknown, string][] = [
    ["30", "body/timeout must be integer"],
    [1.5, "body/timeout must be integer"],
    [true, "body/timeout must be integer"],
    [-5, "body/timeout must be 0 or more (seconds)"],
    [3601, "body/timeout must be at most 3600 (seconds)"],
  ];
  const before = service.callsOf("create").length;
  for (const [timeout, message] of cases) {
    for (const url of ["/v2/sandboxes", "/sandboxes"]) {
      const res = await call("POST", url, { body: { timeout } });
      assert.equal(res.statusCode, 400, `${url} timeout=${JSON.stringify(timeout)}`);
      assert.equal(errorOf(res).message, message);
    }
  }
  assert.equal(service.callsOf("create").length, before);
});

test("wrong types anywhere in the body are 400s naming the field", async () => {
  const { call, service } = useApi();
  const cases: [Record<string, unknown>, string][] = [
    [{ templateID: 5 }, "body/templateID must be string"],
    [{ templateID: "" }, "body/templateID must NOT have fewer than 1 characters"],
    [{ metadata: { a: 1 } }, "body/metadata/a must be string"],
    [{ metadata: "a=b" }, "body/metadata must be object"],
    [{ envVars: { A: null } }, "body/envVars/A must be string"],
    [{ autoPause: "yes" }, "body/autoPause must be boolean"],
    [{ autoResume: {} }, "body/autoResume must have required property 'enabled'"],
    [{ autoResume: { enabled: 1 } }, "body/autoResume/enabled must be boolean"],
    [{ allow_internet_access: "false" }, "body/allow_internet_access must be boolean"],
    [{ network: { allowOut: "1.1.1.1" } }, "body/network/allowOut must be array"],
    [{ network: { denyOut: [1] } }, "body/network/denyOut/0 must be string"],
    [{ network: { allowPublicTraffic: 0 } }, "body/network/allowPublicTraffic must be boolean"],
  ];
  for (const [body, message] of cases) {
    const res = await call("POST", "/v2/sandboxes", { body });
    assert.equal(res.statusCode, 400, JSON.stringify(body));
    assert.equal(errorOf(res).message, message);
  }
  const secure = await call("POST", "/sandboxes", { body: { secure: "true" } });
  assert.equal(errorOf(secure).message, "body/secure must be boolean");
  assert.deepEqual(service.callsOf("create"), []);
});

test("bad combinations and features Warren lacks are 400s", async () => {
  const { call, service } = useApi();
  const cases: [string, Record<string, unknown>, RegExp][] = [
    [
      "/sandboxes",
      { network: { allowPublicTraffic: false } },
      /allowPublicTraffic false requires secure/,
    ],
    ["/v2/sandboxes", { autoResume: { enabled: true } }, /^body\/autoResume needs autoPause/],
    [
      "/v2/sandboxes",
      { network: { rules: { "*": [{ transform: { headers: { a: "b" } } }] } } },
      /^network rules: "\*" is not a domain/,
    ],
    [
      "/v2/sandboxes",
      { network: { rules: { "10.0.0.1": [] } } },
      /^network rules: "10\.0\.0\.1" is not a domain/,
    ],
    [
      "/v2/sandboxes",
      { network: { rules: { "api.a.com": [{ transform: { headers: { Host: "evil.test" } } }] } } },
      /Host cannot be set/,
    ],
    [
      "/v2/sandboxes",
      {
        network: {
          rules: {
            "api.a.com": [
              { transform: { headers: { Authorization: "Bearer ${e2b.identity.tokens.aws}" } } },
            ],
          },
        },
      },
      /\$\{e2b\.identity\.tokens\.aws\} is not supported by Warren/,
    ],
    [
      "/v2/sandboxes",
      { network: { rules: { "api.a.com": [{ transform: { headers: { a: 1 } } }] } } },
      /must be string/,
    ],
    [
      "/v2/sandboxes",
      { network: { egressProxy: { address: "p:1080" } } },
      /egressProxy is not supported/,
    ],
    ["/v2/sandboxes", { iam: { tokens: { t: { audience: "a", tokenType: "b" } } } }, /iam\/tokens/],
    ["/v2/sandboxes", { network: { httpsPorts: [0] } }, /httpsPorts 0 is not a port/],
    ["/v2/sandboxes", { network: { httpsPorts: [49983] } }, /49983 is envd's port/],
    [
      "/v2/sandboxes",
      { autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } },
      /autoPauseMemory false cannot be combined with autoResume/,
    ],
  ];
  for (const [url, body, message] of cases) {
    const res = await call("POST", url, { body });
    assert.equal(res.statusCode, 400, JSON.stringify(body));
    assert.match(errorOf(res).message, message);
  }
  assert.deepEqual(service.callsOf("create"), []);

  // Secured v1 may hide its ports; empty lists of unsupported things are fine.
  const ok = await call("POST", "/sandboxes", {
    body: { secure: true, network: { allowPublicTraffic: false, rules: {} }, volumeMounts: [] },
  });
  assert.equal(ok.statusCode, 201);
});

test("allowOut takes domains, denyOut does not; the sandbox shows them as given", async () => {
  const { call } = useApi();
  const allowOut = ["*.allowed.test", "api.example.com", "198.51.100.7"];
  const res = await call("POST", "/v2/sandboxes", {
    body: { network: { allowOut, denyOut: ["0.0.0.0/0"] } },
  });
  assert.equal(res.statusCode, 201, res.body);
  const { sandboxID } = res.json() as { sandboxID: string };
  const detail = (await call("GET", `/sandboxes/${sandboxID}`)).json() as {
    network: { allowOut: string[] };
  };
  assert.deepEqual(detail.network.allowOut, allowOut);
  const bad = await call("POST", "/v2/sandboxes", {
    body: { network: { denyOut: ["denied.test"] } },
  });
  assert.equal(bad.statusCode, 400);
  assert.match(errorOf(bad).message, /denyOut entry "denied\.test" is not an IPv4 address or CIDR/);
  const junk = await call("POST", "/v2/sandboxes", {
    body: { network: { allowOut: ["not a host"] } },
  });
  assert.match(errorOf(junk).message, /nor a domain \(example\.com, \*\.example\.com\)/);
});
