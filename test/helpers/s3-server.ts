// A real S3-compatible server (s3rver, in-process) for the unit tier and the cluster e2e: each
// test file starts one on a free port over a temporary directory and removes both when done.

import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
import S3rver from "s3rver";
import { S3SharedStore } from "../../src/store/index.js";

/** s3rver checks signatures against these fixed credentials. */
export const S3RVER_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

export interface S3TestServer {
  readonly endpoint: string;
  readonly region: string;
  readonly credentials: typeof S3RVER_CREDENTIALS;
  /** A client of the server's, for what a test does behind the store's back. */
  readonly client: S3Client;
  /** Creates a bucket of a fresh name. */
  createBucket(): Promise<string>;
  /** Names of the object events seen so far (`ObjectCreated:Post` is a completed multipart). */
  readonly events: string[];
  close(): Promise<void>;
}

/** `address`: where it listens (default loopback; a cluster's nodes reach it on a link's). */
export async function startS3Server(address = "127.0.0.1"): Promise<S3TestServer> {
  const directory = await mkdtemp(join(tmpdir(), "warren-s3rver-"));
  const server = new S3rver({
    address,
    port: 0,
    silent: true,
    directory,
    resetOnClose: true,
    vhostBuckets: false,
  });
  const events: string[] = [];
  server.on("event", (event) => {
    for (const record of event.Records) events.push(record.eventName);
  });
  const { port } = await server.run();
  const endpoint = `http://${address}:${port}`;
  const region = "us-east-1";
  const client = new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: S3RVER_CREDENTIALS,
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  return {
    endpoint,
    region,
    credentials: S3RVER_CREDENTIALS,
    client,
    events,
    async createBucket() {
      const bucket = `test-${randomBytes(6).toString("hex")}`;
      await client.send(new CreateBucketCommand({ Bucket: bucket }));
      return bucket;
    },
    async close() {
      client.destroy();
      await server.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}

/** An S3SharedStore on a fresh bucket of `server`'s, under `prefix`, in parts of 5 MiB. */
export async function openS3Store(
  server: S3TestServer,
  prefix = "warren/",
): Promise<{ bucket: string; store: S3SharedStore }> {
  const bucket = await server.createBucket();
  const store = new S3SharedStore({
    endpoint: server.endpoint,
    region: server.region,
    credentials: server.credentials,
    forcePathStyle: true,
    bucket,
    prefix,
    partSizeBytes: S3_PART_BYTES,
  });
  return { bucket, store };
}

/** The smallest part S3 takes: files larger go up in several. */
export const S3_PART_BYTES = 5 * 1024 * 1024;
