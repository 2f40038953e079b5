/**
 * The e2b SDK, loaded by the commands that use it: loading it is most of the command's
 * start-up (about 250 ms), which `--help`, completion and the API-only commands skip.
 */
export function loadSdk() {
  return import("e2b");
}
