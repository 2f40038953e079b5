export { Contexts, InterpreterError } from "./contexts.js";
export { createInterpreter, type Interpreter } from "./interpreter-server.js";
export { builtDrivers, type DriverCommands, kernelStarter } from "./kernel-starter.js";
