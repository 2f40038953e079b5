import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import { ENVD_PORT } from "../../protocol/envd.js";
import { Process, Signal } from "../../protocol/gen/process/process_pb.js";

/**
 * A terminal into a sandbox: xterm.js on a PTY envd starts, over the node's sandbox proxy
 * (same origin; the `E2b-Sandbox-Id` header routes it), as the SDK's `sandbox.pty` does.
 * Returns a function that closes it.
 */
export function openTerminal(
  host: HTMLElement,
  sandboxId: string,
  envdAccessToken: string | undefined,
  onExit: (message: string) => void,
): () => void {
  const term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(host);
  fit.fit();
  const headers: Record<string, string> = {
    "e2b-sandbox-id": sandboxId,
    "e2b-sandbox-port": String(ENVD_PORT),
    authorization: `Basic ${btoa("user:")}`,
    ...(envdAccessToken && { "x-access-token": envdAccessToken }),
  };
  const transport = createConnectTransport({ baseUrl: location.origin, useBinaryFormat: false });
  const envd = createClient(Process, transport);
  const abort = new AbortController();
  let pid: number | undefined;
  const encoder = new TextEncoder();
  const selector = () => ({ selector: { case: "pid" as const, value: pid as number } });

  // Keystrokes go one request at a time, in order; those typed meanwhile go together next.
  let pending = "";
  let sending = false;
  const flush = async () => {
    sending = true;
    while (pending !== "" && pid !== undefined) {
      const data = pending;
      pending = "";
      await envd
        .sendInput(
          { process: selector(), input: { input: { case: "pty", value: encoder.encode(data) } } },
          { headers },
        )
        .catch(() => {});
    }
    sending = false;
  };
  term.onData((data) => {
    pending += data;
    if (!sending) void flush();
  });
  const resize = () => {
    fit.fit();
    if (pid === undefined) return;
    void envd
      .update(
        { process: selector(), pty: { size: { cols: term.cols, rows: term.rows } } },
        { headers },
      )
      .catch(() => {});
  };
  const observer = new ResizeObserver(resize);
  observer.observe(host);

  void (async () => {
    try {
      const stream = envd.start(
        {
          process: { cmd: "/bin/bash", args: ["-i", "-l"], envs: { TERM: "xterm-256color" } },
          pty: { size: { cols: term.cols, rows: term.rows } },
        },
        {
          headers: { ...headers, "keepalive-ping-interval": "30" },
          signal: abort.signal,
          timeoutMs: 0,
        },
      );
      for await (const response of stream) {
        const event = response.event?.event;
        if (event?.case === "start") {
          pid = event.value.pid;
          term.focus();
          if (pending !== "" && !sending) void flush();
        } else if (event?.case === "data" && event.value.output.case === "pty") {
          term.write(event.value.output.value);
        } else if (event?.case === "end") {
          onExit(`the shell ended: ${event.value.status || `exit ${event.value.exitCode}`}`);
        }
      }
    } catch (err) {
      if (!abort.signal.aborted)
        onExit(`the terminal closed: ${err instanceof Error ? err.message : String(err)}`);
    }
  })();

  return () => {
    // The shell is this terminal's: it ends with it (envd keeps processes a client left).
    if (pid !== undefined)
      void envd
        .sendSignal({ process: selector(), signal: Signal.SIGKILL }, { headers })
        .catch(() => {});
    abort.abort();
    observer.disconnect();
    term.dispose();
  };
}
