import { ECRClient, GetAuthorizationTokenCommand } from "@aws-sdk/client-ecr";
import { JWT } from "google-auth-library";
import { WarrenError } from "../shared/index.js";
import type { BasicCredentials } from "./registry-client.js";

/**
 * Registry credentials as E2B's template builder sends them (`fromImage` with a username and
 * password, `fromAWSRegistry`, `fromGCPRegistry`).
 */
export type RegistryCredentials =
  | { readonly type: "registry"; readonly username: string; readonly password: string }
  | {
      readonly type: "aws";
      readonly awsAccessKeyId: string;
      readonly awsSecretAccessKey: string;
      readonly awsRegion: string;
    }
  | {
      readonly type: "gcp";
      readonly serviceAccountJson: string | Readonly<Record<string, unknown>>;
    };

export interface CredentialExchangeOptions {
  /** ECR's API endpoint instead of the region's (tests point it at a fake). */
  readonly ecrEndpoint?: string;
  /** Turns a service account into an access token (default: google-auth-library's JWT). */
  readonly gcpAccessToken?: (account: GcpServiceAccount) => Promise<string>;
  readonly signal?: AbortSignal;
}

export interface GcpServiceAccount {
  readonly client_email: string;
  readonly private_key: string;
}

/** The username Google's registries (Artifact Registry, GCR) take with an OAuth access token. */
export const GCP_TOKEN_USERNAME = "oauth2accesstoken";
const GCP_SCOPE = "https://www.googleapis.com/auth/cloud-platform";

/**
 * The username and password a registry takes for these credentials: as given for `registry`;
 * for `aws`, ECR's GetAuthorizationToken (a base64 `AWS:<password>` valid 12 hours); for
 * `gcp`, an OAuth access token from the service account, with user `oauth2accesstoken`.
 */
export async function exchangeRegistryCredentials(
  credentials: RegistryCredentials,
  options: CredentialExchangeOptions = {},
): Promise<BasicCredentials> {
  switch (credentials.type) {
    case "registry":
      return { username: credentials.username, password: credentials.password };
    case "aws":
      return ecrCredentials(credentials, options);
    case "gcp": {
      const account = parseServiceAccount(credentials.serviceAccountJson);
      const token = await (options.gcpAccessToken ?? googleAccessToken)(account).catch((err) => {
        throw new WarrenError(
          "image_access_denied",
          `Google refused the service account ${account.client_email}: ${(err as Error).message}`,
          { cause: err },
        );
      });
      return { username: GCP_TOKEN_USERNAME, password: token };
    }
    default:
      throw new WarrenError(
        "invalid_argument",
        `unknown registry credentials type ${JSON.stringify((credentials as { type?: unknown }).type)}`,
      );
  }
}

async function ecrCredentials(
  credentials: Extract<RegistryCredentials, { type: "aws" }>,
  options: CredentialExchangeOptions,
): Promise<BasicCredentials> {
  const client = new ECRClient({
    region: credentials.awsRegion,
    credentials: {
      accessKeyId: credentials.awsAccessKeyId,
      secretAccessKey: credentials.awsSecretAccessKey,
    },
    ...(options.ecrEndpoint ? { endpoint: options.ecrEndpoint } : {}),
    maxAttempts: 2,
  });
  try {
    const output = await client.send(
      new GetAuthorizationTokenCommand({}),
      options.signal ? { abortSignal: options.signal } : {},
    );
    const token = output.authorizationData?.[0]?.authorizationToken;
    const decoded = token ? Buffer.from(token, "base64").toString("utf8") : "";
    const colon = decoded.indexOf(":");
    if (colon <= 0) {
      throw new WarrenError("image_pull_failed", "ECR's GetAuthorizationToken returned no token");
    }
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  } catch (err) {
    if (err instanceof WarrenError) throw err;
    const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
    const name = (err as Error).name;
    const denied = status === 400 || status === 401 || status === 403;
    throw new WarrenError(
      denied ? "image_access_denied" : "image_pull_failed",
      `ECR GetAuthorizationToken in ${credentials.awsRegion} failed: ${name}: ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    client.destroy();
  }
}

function parseServiceAccount(json: string | Readonly<Record<string, unknown>>): GcpServiceAccount {
  let value: unknown = json;
  if (typeof json === "string") {
    try {
      value = JSON.parse(json);
    } catch {
      throw new WarrenError("invalid_argument", "serviceAccountJson is not JSON");
    }
  }
  const account = value as Partial<GcpServiceAccount> | null;
  if (typeof account?.client_email !== "string" || typeof account.private_key !== "string") {
    throw new WarrenError(
      "invalid_argument",
      "serviceAccountJson has no client_email and private_key (a service account key file is expected)",
    );
  }
  return { client_email: account.client_email, private_key: account.private_key };
}

async function googleAccessToken(account: GcpServiceAccount): Promise<string> {
  const jwt = new JWT({
    email: account.client_email,
    key: account.private_key,
    scopes: [GCP_SCOPE],
  });
  const { token } = await jwt.getAccessToken();
  if (!token) throw new Error("no access token in Google's answer");
  return token;
}
