export { Keeper, type KeeperOptions } from "./keeper.js";
export { type KeeperArgs, parseKeeperArgs } from "./keeper-args.js";
