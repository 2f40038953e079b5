export * from "./envd.js";
export * as filesystemPb from "./gen/filesystem/filesystem_pb.js";
export * as processPb from "./gen/process/process_pb.js";
export * from "./guest-network.js";
export * from "./internal-api.js";
export * from "./node-view.js";
export * from "./sandbox-list.js";
export * from "./sandbox-target.js";
export type { TeamLimitsView, TeamUsageView, TeamView } from "./teams-view.js";
