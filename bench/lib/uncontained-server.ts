// The node server with its VMs uncontained (as root, no uid, chroot, cgroup or seal checks):
// bench/warren.ts runs the same operations through it to report what containment costs.
// For measuring only: never a way to run Warren.
import { runNodeServer } from "../../src/server/run-node-server.js";

void runNodeServer({ uncontainedForBenchmarks: true });
