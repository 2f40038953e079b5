// The SharedStore contract on each store, each on a real store of its kind: a directory
// (FsSharedStore) and an S3-compatible server in process (S3SharedStore on s3rver).
// Store-specific behaviour is tested beside each store (src/store/*.test.ts).
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before } from "node:test";
import { ListObjectsV2Command, PutObjectCommand } from "@aws-sdk/client-s3";
import { FsSharedStore } from "../../../src/store/index.js";
import { sharedStoreContract } from "../../contracts/shared-store.contract.js";
import { openS3Store, type S3TestServer, startS3Server } from "../../helpers/s3-server.js";

sharedStoreContract("fs", async () => {
  const root = await mkdtemp(join(tmpdir(), "warren-fs-store-"));
  return {
    store: new FsSharedStore(root),
    async putRaw(id, name, data) {
      const path = join(root, "files", id, name);
      await mkdir(join(root, "files", id), { recursive: true });
      // Replaced, not rewritten: a stored file is read-only.
      await rm(path, { force: true });
      await writeFile(path, data);
    },
    rawFiles: async (id) => (await readdir(join(root, "files", id)).catch(() => [])).sort(),
    cleanup: () => rm(root, { recursive: true, force: true }),
  };
});

let server: S3TestServer;
before(async () => {
  server = await startS3Server();
});
after(() => server.close());

sharedStoreContract("s3", async () => {
  const { bucket, store } = await openS3Store(server);
  const key = (id: string, name = "") => `warren/files/${id}/${name}`;
  return {
    store,
    async putRaw(id, name, data) {
      await server.client.send(
        new PutObjectCommand({ Bucket: bucket, Key: key(id, name), Body: data }),
      );
    },
    async rawFiles(id) {
      const page = await server.client.send(
        new ListObjectsV2Command({ Bucket: bucket, Prefix: key(id) }),
      );
      return (page.Contents ?? []).map((o) => (o.Key ?? "").slice(key(id).length)).sort();
    },
    cleanup: () => store.close(),
  };
});
