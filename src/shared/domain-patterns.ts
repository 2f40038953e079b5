/**
 * Domain entries of an `allowOut` list (E2B's): `example.com` names that host alone,
 * `*.example.com` every name below it (not `example.com` itself). Names are compared in
 * lower case, without a trailing dot; internationalized names are given in punycode.
 */
export interface DomainPattern {
  /** The entry as normalized (lower case, no trailing dot). */
  readonly entry: string;
  /** The name, or for a wildcard the suffix after `*.`. */
  readonly name: string;
  readonly wildcard: boolean;
}

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const MAX_NAME = 253;

/** The host name `text` normalized, or undefined when it is not one (an IP literal is not). */
export function normalizeHostName(text: string): string | undefined {
  const name = text.trim().toLowerCase().replace(/\.$/, "");
  if (name.length === 0 || name.length > MAX_NAME) return undefined;
  const labels = name.split(".");
  // A dot at least: `localhost` or a bare word names nothing on the internet.
  if (labels.length < 2 || !labels.every((label) => LABEL.test(label))) return undefined;
  // All-numeric last label: an IPv4 literal or something that reads as one, never a name.
  if (/^\d+$/.test(labels.at(-1) as string)) return undefined;
  return name;
}

/** `entry` as a domain pattern, or undefined when it is not one (e.g. an address or CIDR). */
export function parseDomainPattern(entry: string): DomainPattern | undefined {
  const wildcard = entry.startsWith("*.");
  const name = normalizeHostName(wildcard ? entry.slice(2) : entry);
  if (name === undefined) return undefined;
  return { entry: wildcard ? `*.${name}` : name, name, wildcard };
}

/** Whether `host` (a name as a client sent it: SNI, Host, a DNS question) is allowed. */
export function matchesDomain(host: string, patterns: readonly DomainPattern[]): boolean {
  const name = normalizeHostName(host);
  if (name === undefined) return false;
  return patterns.some((p) => (p.wildcard ? name.endsWith(`.${p.name}`) : name === p.name));
}

/** Whether every name `domain` matches, `allowed` matches too (a rule's domain within a secret's hosts). */
export function coversPattern(allowed: DomainPattern, domain: DomainPattern): boolean {
  if (!allowed.wildcard) return !domain.wildcard && domain.name === allowed.name;
  const below = (name: string) => name.endsWith(`.${allowed.name}`);
  return domain.wildcard ? domain.name === allowed.name || below(domain.name) : below(domain.name);
}
