// Runs the volume NFS server on one directory (argv: dir, host) as `/vol` on port 2049,
// printing "ready" once it listens: the e2e spike starts it in a slot's namespace.
import { startNfsServer } from "../../src/volumes/nfs/nfs-server.js";

const [dir, host] = process.argv.slice(2);
const server = await startNfsServer({
  volumes: [{ key: "vol", root: dir as string }],
  host: host as string,
  port: 2049,
});
process.stdout.write(`ready ${server.port}\n`);
process.on("SIGTERM", () => void server.close().then(() => process.exit(0)));
