import {
  type DomainPattern,
  normalizeHostName,
  parseDomainPattern,
} from "../../shared/domain-patterns.js";
import { EgressPolicyError } from "../errors.js";

/**
 * Headers set on a sandbox's HTTPS requests to one domain (E2B's `network.rules`): the gate
 * terminates TLS for that domain and sets them on each request before it goes upstream.
 * A value may name secrets of the sandbox's team (`${e2b.secrets.NAME}`, the SDK's
 * `Secret.fill`), filled in only there: the guest never holds them.
 */
export interface HeaderRule {
  /** `api.example.com`, or `*.example.com` for every name below it (lower case). */
  readonly domain: string;
  /** In order; a later entry of the same name replaces an earlier one. */
  readonly headers: readonly (readonly [name: string, value: string])[];
}

/** Domains with rules at most, and headers per domain. */
export const MAX_RULE_DOMAINS = 100;
export const MAX_RULE_HEADERS = 32;
/** A header value as given (placeholders unexpanded), and as filled in. */
export const MAX_HEADER_VALUE_BYTES = 8 * 1024;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/;
/** Headers that frame or route the request: setting them would break or redirect it. */
const RESERVED = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "proxy-connection",
]);
const PLACEHOLDER = /\$\{e2b\.([^}]*)\}/g;
const SECRET_NAME = /^[a-z0-9][a-z0-9._-]{0,127}$/i;

/** Checks rules given by a caller; returns them normalized and frozen (EgressPolicyError). */
export function validateHeaderRules(rules: unknown): readonly HeaderRule[] {
  if (!Array.isArray(rules)) throw new EgressPolicyError("network rules must be a list", "");
  if (rules.length > MAX_RULE_DOMAINS) {
    throw new EgressPolicyError(
      `network rules name ${rules.length} domains, more than ${MAX_RULE_DOMAINS}`,
      "",
    );
  }
  const domains = new Set<string>();
  return Object.freeze(
    rules.map((rule: Partial<HeaderRule>) => {
      const pattern = parseDomainPattern(String(rule?.domain ?? "").trim());
      if (!pattern) {
        throw new EgressPolicyError(
          `network rules: "${rule?.domain}" is not a domain (api.example.com, *.example.com)`,
          String(rule?.domain),
        );
      }
      if (domains.has(pattern.entry)) {
        throw new EgressPolicyError(`network rules name ${pattern.entry} twice`, pattern.entry);
      }
      domains.add(pattern.entry);
      const headers = Array.isArray(rule.headers) ? rule.headers : [];
      if (headers.length > MAX_RULE_HEADERS) {
        throw new EgressPolicyError(
          `network rules for ${pattern.entry} set ${headers.length} headers, more than ${MAX_RULE_HEADERS}`,
          pattern.entry,
        );
      }
      return Object.freeze({
        domain: pattern.entry,
        headers: Object.freeze(
          headers.map(([name, value]) => checkHeader(pattern.entry, name, value)),
        ),
      });
    }),
  );
}

function checkHeader(domain: string, name: unknown, value: unknown): readonly [string, string] {
  const where = `network rules for ${domain}`;
  if (typeof name !== "string" || !TOKEN.test(name)) {
    throw new EgressPolicyError(`${where}: "${String(name)}" is not a header name`, domain);
  }
  if (RESERVED.has(name.toLowerCase())) {
    throw new EgressPolicyError(
      `${where}: ${name} cannot be set (it frames or routes the request)`,
      domain,
    );
  }
  if (typeof value !== "string" || /[\0\r\n]/.test(value)) {
    throw new EgressPolicyError(
      `${where}: the value of ${name} must be a string without line breaks or NUL`,
      domain,
    );
  }
  if (Buffer.byteLength(value) > MAX_HEADER_VALUE_BYTES) {
    throw new EgressPolicyError(
      `${where}: the value of ${name} is longer than ${MAX_HEADER_VALUE_BYTES} bytes`,
      domain,
    );
  }
  for (const [, reference] of value.matchAll(PLACEHOLDER)) {
    const secret = /^secrets\.(.*)$/.exec(reference ?? "")?.[1];
    if (secret === undefined) {
      throw new EgressPolicyError(
        `${where}: \${e2b.${reference}} is not supported by Warren (only \${e2b.secrets.NAME})`,
        domain,
      );
    }
    if (!SECRET_NAME.test(secret)) {
      throw new EgressPolicyError(
        `${where}: "${secret}" in \${e2b.secrets.${secret}} is not a secret name`,
        domain,
      );
    }
  }
  return Object.freeze([name, value] as const);
}

/**
 * The rule for `host` (SNI): an exact domain first, else the longest wildcard whose suffix
 * it ends with; rules of several domains are never merged.
 */
export function ruleFor(host: string, rules: readonly HeaderRule[]): HeaderRule | undefined {
  const name = normalizeHostName(host);
  if (name === undefined) return undefined;
  let best: { rule: HeaderRule; pattern: DomainPattern } | undefined;
  for (const rule of rules) {
    const pattern = parseDomainPattern(rule.domain);
    if (!pattern) continue;
    if (!pattern.wildcard) {
      if (pattern.name === name) return rule;
      continue;
    }
    if (!name.endsWith(`.${pattern.name}`)) continue;
    if (!best || pattern.name.length > best.pattern.name.length) best = { rule, pattern };
  }
  return best?.rule;
}

/** Each secret a rule's headers name, with the rule's domain (validated rules). */
export function secretsNamed(
  rules: readonly HeaderRule[],
): { readonly domain: string; readonly secret: string }[] {
  const named: { domain: string; secret: string }[] = [];
  for (const rule of rules) {
    for (const [, template] of rule.headers) {
      for (const match of template.matchAll(PLACEHOLDER)) {
        const secret = (match[1] ?? "").slice("secrets.".length);
        if (!named.some((n) => n.domain === rule.domain && n.secret === secret)) {
          named.push({ domain: rule.domain, secret });
        }
      }
    }
  }
  return named;
}

/** A secret a rule names that the team does not have. */
export class UnknownSecretError extends Error {
  constructor(readonly secret: string) {
    super(`secret "${secret}" does not exist`);
  }
}

/** A secret bound to other hosts (its `allowedHosts`) than the one a request goes to. */
export class SecretHostRefusedError extends Error {
  constructor(
    readonly secret: string,
    readonly host: string,
  ) {
    super(`secret "${secret}" is not sent to ${host}`);
  }
}

/**
 * The rule's headers with every `${e2b.secrets.NAME}` replaced by `secret(NAME)` (which
 * throws UnknownSecretError for a name the team lacks). A value that would not be a valid
 * header once filled in (a secret holding a line break) fails rather than being sent.
 */
export async function fillHeaders(
  rule: HeaderRule,
  secret: (name: string) => Promise<string>,
): Promise<Map<string, string>> {
  const filled = new Map<string, string>();
  for (const [name, template] of rule.headers) {
    let value = "";
    let at = 0;
    for (const match of template.matchAll(PLACEHOLDER)) {
      const reference = (match[1] ?? "").slice("secrets.".length);
      value += template.slice(at, match.index) + (await secret(reference));
      at = (match.index ?? 0) + match[0].length;
    }
    value += template.slice(at);
    if (/[\0\r\n]/.test(value) || Buffer.byteLength(value) > MAX_HEADER_VALUE_BYTES) {
      throw new Error(`the value of ${name} is not a valid header value once filled in`);
    }
    filled.set(name.toLowerCase(), value);
  }
  return filled;
}
