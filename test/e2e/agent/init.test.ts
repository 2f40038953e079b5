import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ENVD_VERSION } from "../../../src/protocol/index.js";
import { useAgentSandbox } from "../../helpers/envd.js";

describe("envd /init, /envs and /health", () => {
  const agent = useAgentSandbox();

  it("answers /health without credentials", async () => {
    const res = await fetch(`${agent.env.url}/health`);
    assert.equal(res.status, 204);
  });

  it("applies env vars, default workdir and default user, and reports its version", async () => {
    const res = await agent.env.init({
      envVars: { STAGE: "one" },
      defaultWorkdir: "/tmp",
      defaultUser: "root",
      timestamp: new Date().toISOString(),
    });
    assert.equal(res.status, 204);
    assert.equal(res.headers.get("x-envd-version"), ENVD_VERSION);
    const result = await agent.sbx.commands.run('echo "$STAGE"; pwd; whoami');
    assert.equal(result.stdout, "one\n/tmp\nroot\n");
    const envs = (await (await fetch(`${agent.env.url}/envs`)).json()) as Record<string, string>;
    assert.equal(envs.STAGE, "one");
    assert.equal(envs.E2B_SANDBOX, "true");
    await agent.env.init({
      defaultUser: "user",
      timestamp: new Date(Date.now() + 1).toISOString(),
    });
  });

  it("ignores an /init older than the last one applied", async () => {
    const now = Date.now() + 10_000;
    assert.equal(
      (
        await agent.env.init({
          envVars: { ORDER: "newer" },
          timestamp: new Date(now).toISOString(),
        })
      ).status,
      204,
    );
    const stale = await agent.env.init({
      envVars: { ORDER: "older" },
      timestamp: new Date(now - 5_000).toISOString(),
    });
    assert.equal(stale.status, 204);
    assert.equal((await agent.sbx.commands.run("echo $ORDER")).stdout, "newer\n");
  });

  it("rejects bad bodies with a JSON error", async () => {
    const res = await fetch(`${agent.env.url}/init`, { method: "POST", body: "{not json" });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), { code: 400, message: "init body is not valid JSON" });
    const wrongType = await agent.env.init({ envVars: { A: 1 } });
    assert.equal(wrongType.status, 400);
    assert.match(
      ((await wrongType.json()) as { message: string }).message,
      /envVars\.A must be a string/,
    );
  });

  it("once a token is set, needs it for /init, RPCs and /envs", async () => {
    const token = "secret-token-1";
    assert.equal((await agent.env.init({ accessToken: token })).status, 204);

    const anonymous = await agent.env.init({ envVars: { X: "1" } });
    assert.equal(anonymous.status, 401);
    assert.deepEqual(await anonymous.json(), {
      code: 401,
      message: "access token reset not authorized",
    });
    const wrong = await agent.env.init({ accessToken: "guess" });
    assert.equal(wrong.status, 401);

    assert.equal((await fetch(`${agent.env.url}/envs`)).status, 401);
    assert.equal(
      (await fetch(`${agent.env.url}/envs`, { headers: { "x-access-token": token } })).status,
      200,
    );
    assert.equal((await fetch(`${agent.env.url}/health`)).status, 204);

    // The orchestrator rotates the token (a fork's child) by proving the current one.
    assert.equal((await agent.env.init({ accessToken: "secret-token-2" }, token)).status, 204);
    assert.equal(
      (await fetch(`${agent.env.url}/envs`, { headers: { "x-access-token": token } })).status,
      401,
    );
    assert.equal(
      (await fetch(`${agent.env.url}/envs`, { headers: { "x-access-token": "secret-token-2" } }))
        .status,
      200,
    );
  });

  it("refuses unknown routes and methods with JSON errors", async () => {
    const missing = await fetch(`${agent.env.url}/nope`, {
      headers: { "x-access-token": "secret-token-2" },
    });
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { code: number }).code, 404);
    const method = await fetch(`${agent.env.url}/health`, { method: "DELETE" });
    assert.equal(method.status, 405);
  });
});
