import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, it } from "node:test";
import { exchangeRegistryCredentials, GCP_TOKEN_USERNAME } from "./registry-credentials.js";

it("passes registry username and password through", async () => {
  assert.deepEqual(
    await exchangeRegistryCredentials({ type: "registry", username: "u", password: "p" }),
    { username: "u", password: "p" },
  );
});

/** A fake of ECR's JSON API: answers GetAuthorizationToken, records what it was sent. */
async function fakeEcr(respond: (target: string) => { status: number; body: unknown }) {
  const seen: { target: string; authorization: string }[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const target = String(req.headers["x-amz-target"]);
      seen.push({ target, authorization: String(req.headers.authorization) });
      const { status, body } = respond(target);
      res.writeHead(status, { "content-type": "application/x-amz-json-1.1" });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  after(() => server.close());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const aws = {
  type: "aws",
  awsAccessKeyId: "AKIAFAKE",
  awsSecretAccessKey: "secret",
  awsRegion: "eu-west-1",
} as const;

it("exchanges AWS keys with ECR's GetAuthorizationToken (AWS SDK against a fake ECR)", async () => {
  const ecr = await fakeEcr(() => ({
    status: 200,
    body: {
      authorizationData: [
        {
          authorizationToken: Buffer.from("AWS:ecr-password").toString("base64"),
          proxyEndpoint: "https://123.dkr.ecr.eu-west-1.amazonaws.com",
        },
      ],
    },
  }));
  const basic = await exchangeRegistryCredentials(aws, { ecrEndpoint: ecr.url });
  assert.deepEqual(basic, { username: "AWS", password: "ecr-password" });
  assert.equal(ecr.seen[0]?.target, "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken");
  assert.match(
    ecr.seen[0]?.authorization ?? "",
    /Credential=AKIAFAKE\/\d+\/eu-west-1\/ecr\/aws4_request/,
  );
});

it("reports ECR refusing the keys as image_access_denied", async () => {
  const ecr = await fakeEcr(() => ({
    status: 400,
    body: { __type: "UnrecognizedClientException", message: "The security token is invalid." },
  }));
  await assert.rejects(
    exchangeRegistryCredentials(aws, { ecrEndpoint: ecr.url }),
    (err: Error & { reason?: string }) =>
      err.reason === "image_access_denied" && /UnrecognizedClientException/.test(err.message),
  );
});

it("maps a GCP service account to oauth2accesstoken + access token", async () => {
  const account = { client_email: "sa@p.iam.gserviceaccount.com", private_key: "-----BEGIN…" };
  const basic = await exchangeRegistryCredentials(
    { type: "gcp", serviceAccountJson: JSON.stringify(account) },
    {
      gcpAccessToken: async (sa) => {
        assert.equal(sa.client_email, account.client_email);
        return "ya29.token";
      },
    },
  );
  assert.deepEqual(basic, { username: GCP_TOKEN_USERNAME, password: "ya29.token" });
  await assert.rejects(
    exchangeRegistryCredentials({ type: "gcp", serviceAccountJson: "{}" }),
    (err: Error & { reason?: string }) => err.reason === "invalid_argument",
  );
  await assert.rejects(
    exchangeRegistryCredentials(
      { type: "gcp", serviceAccountJson: account },
      {
        gcpAccessToken: async () => {
          throw new Error("invalid_grant");
        },
      },
    ),
    (err: Error & { reason?: string }) => err.reason === "image_access_denied",
  );
});
