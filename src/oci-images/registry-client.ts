import { createHash } from "node:crypto";
import { readBounded, WarrenError } from "../shared/index.js";
import { formatImageReference, type ImageReference } from "./image-reference.js";
import { type Descriptor, MANIFEST_ACCEPT } from "./manifest.js";
import {
  type RegistryEndpointOptions,
  registryBaseUrl,
  registryDestinations,
} from "./registry-endpoints.js";
import { type RegistryAnswer, type RegistryDestinations, registryGet } from "./registry-http.js";
import { parseWwwAuthenticate } from "./www-authenticate.js";

/** Username and password for a registry: its own, or exchanged from cloud credentials. */
export interface BasicCredentials {
  readonly username: string;
  readonly password: string;
}

export interface RegistryClientOptions extends RegistryEndpointOptions {
  readonly credentials?: BasicCredentials;
  readonly signal?: AbortSignal;
  /** Longest wait for response headers, and for each chunk of a body (default 60 s). */
  readonly idleTimeoutMs?: number;
}

/** A manifest as served: the raw bytes (their sha256 is the manifest's digest). */
export interface FetchedManifest {
  readonly body: string;
  readonly contentType: string;
  readonly digest: string;
}

/** Manifests and configs are small; anything bigger is not a manifest. */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

/**
 * A client of one repository on a registry speaking the Docker Registry HTTP API v2. It
 * answers auth challenges as Docker does: anonymous first; on `401 Bearer realm=…` it asks the
 * realm for a pull token (with Basic credentials when it has some) and retries; on
 * `401 Basic` it retries with the credentials. Tokens are kept for the client's life.
 */
export class RegistryClient {
  readonly #ref: ImageReference;
  readonly #base: string;
  readonly #options: RegistryClientOptions;
  readonly #destinations: RegistryDestinations;
  #authorization: string | undefined;

  constructor(ref: ImageReference, options: RegistryClientOptions = {}) {
    this.#ref = ref;
    this.#base = registryBaseUrl(ref.registry, options);
    this.#options = options;
    this.#destinations = registryDestinations(options);
  }

  /**
   * The repository this client pulls from, as a URL (`https://ghcr.io/v2/org/app`): the cache
   * remembers which repository served which blob.
   */
  get source(): string {
    return `${this.#base}/v2/${this.#ref.repository}`;
  }

  /** The manifest (or index) for a tag or digest; a digest given is checked against the bytes. */
  async getManifest(selector: string): Promise<FetchedManifest> {
    const url = `${this.#base}/v2/${this.#ref.repository}/manifests/${selector}`;
    const { response, done } = await this.#get(url, { accept: MANIFEST_ACCEPT }, "manifest");
    try {
      const bytes = await readLimited(response, MAX_MANIFEST_BYTES, url);
      const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
      if (selector.startsWith("sha256:") && digest !== selector) {
        throw new WarrenError(
          "image_pull_failed",
          `manifest ${selector} of ${this.#name()} arrived with digest ${digest}`,
        );
      }
      return {
        body: bytes.toString("utf8"),
        contentType: response.header("content-type") ?? "",
        digest,
      };
    } finally {
      done();
    }
  }

  /**
   * A blob's bytes as they arrive (not yet verified: the caller hashes them). Each chunk must
   * come within the idle timeout; `close` must be called when done, also on failure.
   */
  async openBlob(
    blob: Descriptor,
  ): Promise<{ chunks: AsyncIterable<Uint8Array>; close: () => void }> {
    const url = `${this.#base}/v2/${this.#ref.repository}/blobs/${blob.digest}`;
    const { response, done, touch } = await this.#get(url, {}, `blob ${blob.digest}`);
    const body = response.body;
    async function* chunks(): AsyncIterable<Uint8Array> {
      for await (const chunk of body) {
        touch();
        yield chunk;
      }
    }
    return { chunks: chunks(), close: done };
  }

  #name(): string {
    return formatImageReference(this.#ref);
  }

  #idleTimeoutMs(): number {
    return this.#options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  }

  /** GET with auth, an idle watchdog and the caller's signal; maps failures to reasons. */
  async #get(
    url: string,
    headers: Record<string, string>,
    what: string,
  ): Promise<{ response: RegistryAnswer; done: () => void; touch: () => void }> {
    let response = await this.#fetch(url, headers, "registry");
    if (response.response.status === 401) {
      const challenge = response.response.header("www-authenticate") ?? "";
      await drain(response);
      await this.#authenticate(challenge, url);
      response = await this.#fetch(url, headers, "registry");
    }
    const status = response.response.status;
    if (status >= 200 && status < 300) return response;
    const detail = await errorDetail(response);
    const name = this.#name();
    if (status === 404) {
      throw new WarrenError(
        "image_not_found",
        `${name}: the registry has no ${what} (GET ${url}: 404${detail})`,
      );
    }
    if (status === 401 || status === 403) {
      throw new WarrenError(
        "image_access_denied",
        `${name}: the registry refused access to the ${what} (${status}${detail}): the image may not exist, or need credentials`,
      );
    }
    throw new WarrenError("image_pull_failed", `${name}: GET ${url} answered ${status}${detail}`);
  }

  async #fetch(
    url: string,
    headers: Record<string, string>,
    role: string,
  ): Promise<{ response: RegistryAnswer; done: () => void; touch: () => void }> {
    const controller = new AbortController();
    const outer = this.#options.signal;
    const abortFromOuter = () => controller.abort(outer?.reason);
    if (outer?.aborted) abortFromOuter();
    outer?.addEventListener("abort", abortFromOuter, { once: true });
    const timeoutMs = this.#idleTimeoutMs();
    let timer: NodeJS.Timeout | undefined;
    const touch = () => {
      clearTimeout(timer);
      timer = setTimeout(
        () =>
          controller.abort(
            new WarrenError("image_pull_failed", `GET ${url}: nothing for ${timeoutMs} ms`),
          ),
        timeoutMs,
      );
    };
    const done = () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", abortFromOuter);
      controller.abort();
    };
    touch();
    try {
      const auth: Record<string, string> = this.#authorization
        ? { authorization: this.#authorization }
        : {};
      const response = await registryGet(url, {
        headers: { ...headers, ...auth },
        signal: controller.signal,
        destinations: this.#destinations,
        role,
      });
      // A body cut short (the idle timeout, the caller's signal, a reset) says why, as a
      // failed request would.
      const signal = controller.signal;
      async function* body(): AsyncIterable<Buffer> {
        try {
          yield* response.body;
        } catch (err) {
          throw fetchFailure(url, err, signal);
        }
      }
      return {
        response: { ...response, body: body() },
        done: () => {
          response.destroy();
          done();
        },
        touch,
      };
    } catch (err) {
      done();
      throw fetchFailure(url, err, controller.signal);
    }
  }

  /** Answers a challenge: a Bearer token from the realm, or Basic credentials. */
  async #authenticate(header: string, url: string): Promise<void> {
    const credentials = this.#options.credentials;
    const basic = credentials
      ? `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`).toString("base64")}`
      : undefined;
    const challenges = parseWwwAuthenticate(header);
    const bearer = challenges.find((c) => c.scheme === "bearer");
    if (bearer?.params.realm) {
      this.#authorization = `Bearer ${await this.#token(bearer.params, basic)}`;
      return;
    }
    if (challenges.some((c) => c.scheme === "basic") && basic) {
      this.#authorization = basic;
      return;
    }
    throw new WarrenError(
      "image_access_denied",
      `${this.#name()}: GET ${url} needs ${credentials ? "an unsupported kind of" : ""} authentication (${header || "no challenge"})`.replace(
        "  ",
        " ",
      ),
    );
  }

  async #token(
    params: Readonly<Record<string, string>>,
    basic: string | undefined,
  ): Promise<string> {
    let realm: URL;
    try {
      realm = new URL(params.realm ?? "");
    } catch {
      throw new WarrenError(
        "image_pull_failed",
        `the registry's token realm is not a URL: ${params.realm}`,
      );
    }
    if (params.service) realm.searchParams.set("service", params.service);
    realm.searchParams.set("scope", params.scope ?? `repository:${this.#ref.repository}:pull`);
    const tokenUrl = realm.toString();
    const { response, done } = await this.#fetchToken(tokenUrl, basic);
    try {
      if (response.status === 401 || response.status === 403) {
        throw new WarrenError(
          "image_access_denied",
          `${this.#name()}: the registry's token service refused ${basic ? "the credentials" : "an anonymous pull"} (${response.status})`,
        );
      }
      if (response.status < 200 || response.status >= 300) {
        throw new WarrenError(
          "image_pull_failed",
          `token request ${realm.origin}${realm.pathname} answered ${response.status}`,
        );
      }
      const body = await readLimited(response, MAX_MANIFEST_BYTES, tokenUrl);
      const json = JSON.parse(body.toString("utf8")) as { token?: unknown; access_token?: unknown };
      const token = typeof json.token === "string" ? json.token : json.access_token;
      if (typeof token !== "string" || token === "") {
        throw new WarrenError("image_pull_failed", "the registry's token service sent no token");
      }
      return token;
    } catch (err) {
      if (err instanceof SyntaxError) {
        throw new WarrenError(
          "image_pull_failed",
          "the registry's token service sent invalid JSON",
        );
      }
      throw err;
    } finally {
      done();
    }
  }

  async #fetchToken(
    url: string,
    basic: string | undefined,
  ): Promise<{ response: RegistryAnswer; done: () => void }> {
    const saved = this.#authorization;
    // The token request carries the Basic credentials, never a previous token.
    this.#authorization = basic;
    try {
      return await this.#fetch(url, {}, "token realm");
    } finally {
      this.#authorization = saved;
    }
  }
}

function fetchFailure(url: string, err: unknown, signal: AbortSignal): WarrenError {
  if (signal.reason instanceof WarrenError) return signal.reason;
  // A refused destination (registry-http.ts) says so itself.
  if (err instanceof WarrenError) return err;
  if (signal.aborted) {
    return new WarrenError("image_pull_failed", `GET ${url}: aborted`, { cause: err });
  }
  const cause = err as { code?: string; message?: string };
  const detail = cause.code ? `${cause.code} ${cause.message ?? ""}`.trim() : cause.message;
  return new WarrenError("image_pull_failed", `GET ${url} failed: ${detail}`, { cause: err });
}

async function drain(fetched: { response: RegistryAnswer; done: () => void }): Promise<void> {
  fetched.done();
}

/** `: CODE message` from a registry's JSON error body, best effort and bounded. */
async function errorDetail(fetched: {
  response: RegistryAnswer;
  done: () => void;
}): Promise<string> {
  try {
    const text = (await readLimited(fetched.response, 64 * 1024, "")).toString("utf8");
    const json = JSON.parse(text) as { errors?: { code?: string; message?: string }[] };
    const first = json.errors?.[0];
    return first ? `: ${[first.code, first.message].filter(Boolean).join(" ")}` : "";
  } catch {
    return "";
  } finally {
    fetched.done();
  }
}

/** The whole body, refusing more than `max` bytes (a manifest that big is not one). */
async function readLimited(response: RegistryAnswer, max: number, url: string): Promise<Buffer> {
  const declared = Number(response.header("content-length") ?? "0");
  if (declared > max) {
    throw new WarrenError(
      "image_invalid",
      `${url} is ${declared} bytes, over the ${max}-byte limit`,
    );
  }
  return readBounded(response.body, max, {
    tooLarge: () => new WarrenError("image_invalid", `${url} is over the ${max}-byte limit`),
  });
}
