export interface ReadBoundedOptions {
  /** The error thrown once the body passes `maxBytes`. */
  readonly tooLarge: () => Error;
  /**
   * Read the rest unkept before throwing, instead of stopping (which destroys a Node stream):
   * a server that answers 413 needs the request read to its end for the answer to arrive.
   */
  readonly drain?: boolean;
}

/**
 * A body read whole, but never more than `maxBytes` of it kept: what Warren reads from a
 * client, a guest, a node or a registry is bounded by whoever reads it. The one bounded
 * reader: request bodies, upstream answers, envd's and the interpreter's JSON.
 */
export async function readBounded(
  body: AsyncIterable<Uint8Array>,
  maxBytes: number,
  options: ReadBoundedOptions,
): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  for await (const chunk of body) {
    bytes += chunk.byteLength;
    if (bytes <= maxBytes) chunks.push(chunk);
    else if (!options.drain) throw options.tooLarge();
  }
  if (bytes > maxBytes) throw options.tooLarge();
  return Buffer.concat(chunks);
}
