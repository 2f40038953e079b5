/** Languages this interpreter runs, by the name a context reports. */
export const LANGUAGES = ["python", "javascript", "typescript", "bash", "r"] as const;
export type Language = (typeof LANGUAGES)[number];

/** E2B's normalisation: none or empty is python; case and spaces ignored; js and ts aliases. */
export function normalizeLanguage(name: string | null | undefined): string {
  const trimmed = (name ?? "").trim().toLowerCase();
  if (trimmed === "") return "python";
  if (trimmed === "js") return "javascript";
  if (trimmed === "ts") return "typescript";
  return trimmed;
}

export function isLanguage(name: string): name is Language {
  return (LANGUAGES as readonly string[]).includes(name);
}
