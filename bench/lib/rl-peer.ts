// bench:rl's peer backend: the same workloads in Docker containers under gVisor's runsc
// (bench/lib/peer-gvisor.ts), the isolation many trainers use instead of microVMs. Python
// runs as `python3 -` per call (a container has no kernel kept warm); a fork or a snapshot
// is a commit of the container's filesystem and containers started from it, which is what
// Docker offers for branching (its processes are not kept).
import type { GvisorPeer } from "./peer-gvisor.js";
import { repoSetupScript } from "./rl-tasks.js";
import type { Backend, Box } from "./rl-workloads.js";

const EXEC_TIMEOUT_MS = 300_000;

class PeerBox implements Box {
  constructor(
    private readonly peer: GvisorPeer,
    readonly id: string,
  ) {}

  async sh(cmd: string): Promise<{ exitCode: number; stdout: string }> {
    const run = await this.peer.exec(this.id, cmd, { timeoutMs: EXEC_TIMEOUT_MS });
    return { exitCode: run.exitCode, stdout: run.stdout };
  }

  async python(code: string): Promise<0 | 1> {
    const script = Buffer.from(code).toString("base64");
    const run = await this.sh(`echo ${script} | base64 -d | python3 -`);
    return run.exitCode === 0 ? 1 : 0;
  }

  kill(): Promise<void> {
    return this.peer.remove(this.id);
  }
}

/** Builds the repository's image (a container set up, then committed), then the backend. */
export async function peerBackend(peer: GvisorPeer): Promise<Backend & { buildMs: number }> {
  const t = performance.now();
  const builder = await peer.create(peer.image);
  try {
    const made = await peer.exec(builder, repoSetupScript(), { timeoutMs: EXEC_TIMEOUT_MS });
    if (made.exitCode !== 0) throw new Error(`the repository's setup failed: ${made.stderr}`);
    await peer.commit(builder, "rl-repo");
  } finally {
    await peer.remove(builder);
  }
  const buildMs = performance.now() - t;
  const create = async (image: string) => new PeerBox(peer, await peer.create(image));
  let commits = 0;
  const commit = async (box: Box) => {
    const tag = `rl-${++commits}`;
    await peer.commit(box.id, tag);
    return `warren-peer:${tag}`;
  };
  return {
    name: "gvisor",
    buildMs,
    retries: 0,
    createPython: () => create(peer.image),
    createRepo: () => create("warren-peer:rl-repo"),
    async fork(box, n) {
      const image = await commit(box);
      return Promise.all(Array.from({ length: n }, () => create(image)));
    },
    snapshot: commit,
    fromSnapshot: create,
  };
}
