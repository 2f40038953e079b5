export * from "./envd.js";
export * as filesystemPb from "./gen/filesystem/filesystem_pb.js";
export * as processPb from "./gen/process/process_pb.js";
export * from "./guest-network.js";
export * from "./internal-api.js";
export * from "./keeper.js";
export * from "./lifecycle-events.js";
export * from "./node-view.js";
export * from "./sandbox-list.js";
export * from "./sandbox-target.js";
export {
  TEAM_LIMIT_KEYS,
  type TeamLimits,
  type TeamUsageView,
  type TeamView,
} from "./teams-view.js";
