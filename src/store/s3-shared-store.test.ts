import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { ListObjectsV2Command } from "@aws-sdk/client-s3";
import {
  BIG_FILE_BYTES,
  makeSnapshot,
  reason,
  tempDir,
} from "../../test/contracts/shared-store.contract.js";
import { openS3Store, type S3TestServer, startS3Server } from "../../test/helpers/s3-server.js";
import { S3SharedStore } from "./s3-shared-store.js";

let server: S3TestServer;
before(async () => {
  server = await startS3Server();
});
after(() => server.close());

it("s3 store: a file past one part goes up in parts, and comes back whole", async (t) => {
  const { bucket, store } = await openS3Store(server, "");
  t.after(() => store.close());
  const src = await tempDir(t, "s3-parts");
  const big = randomBytes(BIG_FILE_BYTES);
  const files = await makeSnapshot(src, { "disk.qcow2": big, "meta.json": Buffer.from("{}") });
  const completed = server.events.length;
  await store.publish("parts", src, files);
  // s3rver reports a completed multipart upload as a POST, a plain upload as a PUT.
  assert.deepEqual(server.events.slice(completed).sort(), [
    "ObjectCreated:Post",
    "ObjectCreated:Put",
    "ObjectCreated:Put",
  ]);
  const listed = await server.client.send(new ListObjectsV2Command({ Bucket: bucket }));
  assert.deepEqual((listed.Contents ?? []).map((o) => o.Key).sort(), [
    "files/parts/disk.qcow2",
    "files/parts/meta.json",
    "manifests/parts.json",
  ]);
  const into = join(src, "..", "fetched");
  t.after(() =>
    import("node:fs/promises").then((fs) => fs.rm(into, { recursive: true, force: true })),
  );
  await store.fetch("parts", into);
  assert.ok((await readFile(join(into, "disk.qcow2"))).equals(big));
});

it("s3 store: an unreachable endpoint is store_unavailable", async () => {
  const store = new S3SharedStore({
    endpoint: "http://127.0.0.1:9",
    region: "us-east-1",
    bucket: "nowhere",
    prefix: "",
    forcePathStyle: true,
    credentials: server.credentials,
  });
  try {
    await assert.rejects(store.manifest("x"), reason("store_unavailable"));
  } finally {
    await store.close();
  }
  assert.throws(
    () => new S3SharedStore({ region: "r", bucket: "b", prefix: "", partSizeBytes: 1024 }),
    reason("invalid_argument"),
  );
});
