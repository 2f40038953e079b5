import { runNodeServer } from "./run-node-server.js";

void runNodeServer();
