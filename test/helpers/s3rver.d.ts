// The part of s3rver's API (a test-only S3-compatible server, shipped without types) we use.
declare module "s3rver" {
  import type { AddressInfo } from "node:net";

  interface S3rverEvent {
    readonly Records: readonly { readonly eventName: string; readonly s3: unknown }[];
  }

  export default class S3rver {
    constructor(options: {
      address?: string;
      port?: number;
      silent?: boolean;
      directory: string;
      resetOnClose?: boolean;
      allowMismatchedSignatures?: boolean;
      vhostBuckets?: boolean;
    });
    run(): Promise<AddressInfo>;
    close(): Promise<void>;
    on(event: "event", listener: (event: S3rverEvent) => void): this;
  }
}
