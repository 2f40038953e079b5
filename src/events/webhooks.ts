import { randomUUID } from "node:crypto";
import { isIP } from "node:net";
import type {
  DeliveryOutcome,
  WebhookCatalog,
  WebhookPatch,
  WebhookRow,
} from "../catalog/index.js";
import { LIFECYCLE_TYPES } from "../protocol/index.js";
import type { SecretBox } from "../secrets/index.js";
import { WarrenError } from "../shared/index.js";
import { article, nonPublicAddress } from "../shared/public-address.js";

/** E2B's `WebhookDetail`, with how its deliveries go (Warren's: E2B shows them elsewhere). */
export interface WebhookInfo {
  readonly id: string;
  readonly teamId: string;
  readonly name: string;
  readonly createdAt: string;
  readonly url: string;
  readonly enabled: boolean;
  readonly events: readonly string[];
  readonly lastDelivery?: DeliveryOutcome;
  /** Deliveries given up since the last one delivered. */
  readonly failures: number;
}

/** What a create or an update may say (E2B's `WebhookCreate`, `WebhookConfiguration`). */
export interface WebhookInput {
  readonly name?: unknown;
  readonly url?: unknown;
  readonly enabled?: unknown;
  readonly events?: unknown;
  readonly signatureSecret?: unknown;
}

export interface WebhooksOptions {
  readonly catalog: WebhookCatalog;
  /** Seals signature secrets (the node's key, as team secrets'). */
  readonly box: SecretBox;
  /** Hosts (`host[:port]`) deliveries may reach on non-public addresses (the operator's). */
  readonly privateHosts: ReadonlySet<string>;
}

/** Webhooks per team: E2B answers 429 past its own cap. */
export const MAX_WEBHOOKS_PER_TEAM = 32;
const MAX_NAME = 128;
const MAX_URL = 2048;
const MAX_SECRET = 4096;
const TYPES: ReadonlySet<string> = new Set(LIFECYCLE_TYPES);

/**
 * A team's webhooks (E2B's `/events/webhooks`): each field checked, naming what is wrong; the
 * signature secret sealed to the webhook (its team and id) and never returned; another
 * team's reads as missing. Deliveries are the Deliverer's.
 */
export class Webhooks {
  readonly #o: WebhooksOptions;

  constructor(options: WebhooksOptions) {
    this.#o = options;
  }

  async create(teamId: string, input: WebhookInput): Promise<WebhookInfo> {
    const { catalog, box } = this.#o;
    if ((await catalog.listWebhooks(teamId)).length >= MAX_WEBHOOKS_PER_TEAM) {
      throw new WarrenError(
        "quota_exceeded",
        `the team has ${MAX_WEBHOOKS_PER_TEAM} webhooks, the most it may: delete one first`,
      );
    }
    const name = required("name", input.name, nameOf);
    const url = required("url", input.url, (value) => this.#urlOf(value));
    const events = required("events", input.events, eventsOf);
    const secret = required("signatureSecret", input.signatureSecret, secretOf);
    const enabled = input.enabled === undefined ? true : booleanOf(input.enabled);
    const id = randomUUID();
    const now = new Date().toISOString();
    const row: WebhookRow = {
      id,
      teamId,
      name,
      url,
      enabled,
      events,
      sealedSecret: box.seal(sealedFor(teamId, id), secret),
      createdAt: now,
      updatedAt: now,
      failures: 0,
    };
    await catalog.insertWebhook(row);
    return infoOf(row);
  }

  async list(teamId: string): Promise<WebhookInfo[]> {
    return (await this.#o.catalog.listWebhooks(teamId)).map(infoOf);
  }

  async get(teamId: string, id: string): Promise<WebhookInfo> {
    return infoOf(found(id, await this.#o.catalog.getWebhook(teamId, id)));
  }

  /** E2B's PATCH: each field given replaces the old one; `events: []` is refused. */
  async update(teamId: string, id: string, input: WebhookInput): Promise<WebhookInfo> {
    const patch: { -readonly [K in keyof WebhookPatch]: WebhookPatch[K] } = {};
    if (input.name !== undefined) patch.name = nameOf(input.name);
    if (input.url !== undefined) patch.url = this.#urlOf(input.url);
    if (input.events !== undefined) patch.events = eventsOf(input.events);
    if (input.enabled !== undefined) patch.enabled = booleanOf(input.enabled);
    if (input.signatureSecret !== undefined) {
      patch.sealedSecret = this.#o.box.seal(sealedFor(teamId, id), secretOf(input.signatureSecret));
    }
    return infoOf(found(id, await this.#o.catalog.updateWebhook(teamId, id, patch)));
  }

  async delete(teamId: string, id: string): Promise<void> {
    if (!(await this.#o.catalog.deleteWebhook(teamId, id))) found(id, undefined);
  }

  /** The signature secret of a delivery's webhook (the Deliverer's only way to it). */
  secretOf(webhook: Pick<WebhookRow, "id" | "teamId" | "sealedSecret">): string {
    return this.#o.box.open(sealedFor(webhook.teamId, webhook.id), webhook.sealedSecret);
  }

  /** An http(s) URL without credentials; an address literal must be public or listed. */
  #urlOf(value: unknown): string {
    if (typeof value !== "string" || value.length > MAX_URL) {
      throw invalid("url", `must be an http or https URL of at most ${MAX_URL} characters`);
    }
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw invalid("url", "must be a valid http or https URL");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw invalid("url", "must be a valid http or https URL");
    }
    if (url.username || url.password) {
      throw invalid("url", "must not carry credentials: deliveries are signed instead");
    }
    const hostname = url.hostname.replace(/^\[|\]$/g, "");
    const kind = isIP(hostname) !== 0 ? nonPublicAddress(hostname) : undefined;
    if (kind && !this.#o.privateHosts.has(url.host.toLowerCase())) {
      throw invalid(
        "url",
        `names ${hostname}, ${article(kind)} ${kind} address: deliveries reach only public addresses, unless the operator lists ${url.host} in WARREN_WEBHOOK_PRIVATE_HOSTS`,
      );
    }
    return url.href;
  }
}

/** What a signature secret is sealed to: its webhook (never a team secret's id). */
function sealedFor(teamId: string, webhookId: string) {
  return { teamId, secretId: `webhook:${webhookId}` };
}

function infoOf(row: WebhookRow): WebhookInfo {
  return {
    id: row.id,
    teamId: row.teamId,
    name: row.name,
    createdAt: row.createdAt,
    url: row.url,
    enabled: row.enabled,
    events: row.events,
    ...(row.lastDelivery && { lastDelivery: row.lastDelivery }),
    failures: row.failures,
  };
}

function found<T>(id: string, row: T | undefined): T {
  if (row === undefined) throw new WarrenError("webhook_not_found", `webhook ${id} not found`);
  return row;
}

function invalid(field: string, problem: string): WarrenError {
  return new WarrenError("invalid_argument", `body/${field} ${problem}`);
}

function required<T>(field: string, value: unknown, parse: (value: unknown) => T): T {
  if (value === undefined || value === null) throw invalid(field, "is required");
  return parse(value);
}

function nameOf(value: unknown): string {
  if (typeof value !== "string" || value.trim() === "" || value.length > MAX_NAME) {
    throw invalid("name", `must be a non-empty string of at most ${MAX_NAME} characters`);
  }
  return value;
}

function eventsOf(value: unknown): string[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw invalid("events", "must specify at least one event type");
  }
  for (const type of value) {
    if (typeof type !== "string" || !TYPES.has(type)) {
      throw invalid(
        "events",
        `has unknown type ${JSON.stringify(type)}: each must be one of ${LIFECYCLE_TYPES.join(", ")}`,
      );
    }
  }
  return [...new Set(value as string[])];
}

function secretOf(value: unknown): string {
  if (typeof value !== "string" || value === "" || value.length > MAX_SECRET) {
    throw invalid(
      "signatureSecret",
      `must be a non-empty string of at most ${MAX_SECRET} characters`,
    );
  }
  return value;
}

function booleanOf(value: unknown): boolean {
  if (typeof value !== "boolean") throw invalid("enabled", "must be true or false");
  return value;
}
