import { randomBytes } from "node:crypto";

/**
 * Directory listings kept between the pages of one READDIR/READDIRPLUS sequence. A client
 * lists a large directory in pages, each resuming at a cookie; re-reading and sorting the
 * directory for every page made a listing of N entries cost O(N²). A listing starts at cookie
 * 0 with a fresh read (so a new `ls` sees new names), gets a random cookie verifier, and is
 * kept for a short while: a page that brings its verifier back resumes from it. A cookie is
 * the position after an entry in the listing's sorted names.
 */
export interface Listing {
  readonly verifier: Buffer;
  /** The volume and directory listed. */
  readonly volume: string;
  readonly dir: bigint;
  readonly names: readonly string[];
}

/**
 * Listings kept at once (the oldest used goes first), names in all of them (~60 B each: a
 * guest starting listing after listing of a huge directory keeps one copy, not sixteen), and
 * how long one is kept unused.
 */
const MAX_KEPT = 16;
const MAX_KEPT_NAMES = 500_000;
const KEEP_MS = 30_000;

export class Listings {
  /** By verifier (hex); the map's order is the order of last use. */
  readonly #kept = new Map<string, { listing: Listing; usedAt: number }>();
  #names = 0;

  /** A new listing of a directory's names (sorted here). */
  start(volume: string, dir: bigint, names: string[]): Listing {
    const listing = { verifier: randomBytes(8), volume, dir, names: names.sort() };
    this.#keep(listing);
    return listing;
  }

  /** The listing a page's verifier names, if it is still kept and is of that directory. */
  resume(volume: string, dir: bigint, verifier: Buffer): Listing | undefined {
    const key = verifier.toString("hex");
    const kept = this.#kept.get(key);
    if (!kept) return undefined;
    const { listing } = kept;
    if (performance.now() - kept.usedAt > KEEP_MS) {
      this.#drop(key);
      return undefined;
    }
    if (listing.volume !== volume || listing.dir !== dir) return undefined;
    this.#keep(listing);
    return listing;
  }

  #keep(listing: Listing): void {
    const key = listing.verifier.toString("hex");
    this.#drop(key);
    this.#kept.set(key, { listing, usedAt: performance.now() });
    this.#names += listing.names.length;
    // The newest stays even alone over the bound: its pages are being asked for.
    while (this.#kept.size > MAX_KEPT || (this.#names > MAX_KEPT_NAMES && this.#kept.size > 1)) {
      const oldest = this.#kept.keys().next().value;
      if (oldest === undefined) break;
      this.#drop(oldest);
    }
  }

  #drop(key: string): void {
    const kept = this.#kept.get(key);
    if (!kept) return;
    this.#kept.delete(key);
    this.#names -= kept.listing.names.length;
  }
}
