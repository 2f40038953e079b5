/** One challenge of a `WWW-Authenticate` header: `Bearer realm="…",service="…",scope="…"`. */
export interface AuthChallenge {
  /** Lowercased: `bearer`, `basic`. */
  readonly scheme: string;
  /** Parameter names lowercased, values unquoted. */
  readonly params: Readonly<Record<string, string>>;
}

/**
 * Parses a `WWW-Authenticate` header into its challenges (RFC 7235). Registries send one
 * Bearer or Basic challenge; values may be quoted and may hold commas (scopes do), so this is a
 * small tokenizer rather than a split.
 */
export function parseWwwAuthenticate(header: string): AuthChallenge[] {
  const challenges: { scheme: string; params: Record<string, string> }[] = [];
  const re =
    /\s*(?:([A-Za-z][\w!#$%&'*+.^`|~-]*)(?:\s+(?=[\w!#$%&'*+.^`|~-]+\s*=)|\s*(?:,|$))|([\w!#$%&'*+.^`|~-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*(?:,|$))/y;
  re.lastIndex = 0;
  while (re.lastIndex < header.length) {
    const match = re.exec(header);
    if (match === null || match[0] === "") break;
    if (match[1] !== undefined) {
      challenges.push({ scheme: match[1].toLowerCase(), params: {} });
    } else if (match[2] !== undefined) {
      const current = challenges.at(-1);
      if (!current) continue;
      const value = match[3] !== undefined ? match[3].replace(/\\(.)/g, "$1") : (match[4] ?? "");
      current.params[match[2].toLowerCase()] = value;
    }
  }
  return challenges;
}
