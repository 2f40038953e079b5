/**
 * Makes a real guest hostile, as its root user could: a Python script takes envd's own
 * listening socket (pidfd_getfd, root may), freezes envd (SIGSTOP) and serves port 49983
 * itself in the mode the test sets. Modes as test/helpers/hostile-envd.ts names them:
 * `silent` (reads, never answers), `trickle` (the head, one byte a second), `huge-headers`,
 * `endless` (a chunked body without end). The mode is set through a control port of its own
 * (HOSTILE_CONTROL_PORT, `GET /<mode>` through the sandbox proxy); it lives in the guest's
 * memory, so a pause and resume keep it.
 */
import type { Sandbox } from "e2b";

export const HOSTILE_CONTROL_PORT = 8081;
export type GuestHostileMode = "silent" | "trickle" | "huge-headers" | "endless";

const SCRIPT = String.raw`
import ctypes, os, signal, socket, sys, threading, time

MODE = ["silent"]

def listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes

def listener_owner(port):
    """The process holding the port's listening socket (envd, not tini above it), and its fd."""
    inodes = listening_inodes(port)
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return int(pid), int(fd)
    raise SystemExit("no listener")

def steal_listener(pid, fd):
    libc = ctypes.CDLL(None, use_errno=True)
    got = libc.syscall(438, os.pidfd_open(pid), fd, 0)  # pidfd_getfd
    if got < 0:
        raise OSError(ctypes.get_errno(), "pidfd_getfd")
    listener = socket.socket(fileno=got)
    listener.setblocking(True)  # envd's event loop made the shared description non-blocking
    return listener

def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    return data

def serve(conn):
    try:
        if read_head(conn) is None:
            return
        mode = MODE[0]
        if mode == "silent":
            while conn.recv(4096):
                pass
        elif mode == "trickle":
            for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"y" * 100000:
                conn.sendall(bytes([byte]))
                time.sleep(1)
        elif mode == "huge-headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            n = 0
            while True:
                conn.sendall(b"x-pad-%d: %s\r\n" % (n, b"h" * 1000))
                n += 1
        elif mode == "endless":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
            while True:
                conn.sendall(chunk)
    except OSError:
        pass
    finally:
        conn.close()

def accept_forever(listener, handle):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()

def control(conn):
    try:
        head = read_head(conn) or b""
        mode = head.split(b" ")[1].decode().strip("/") if b" " in head else ""
        if mode:
            MODE[0] = mode
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(MODE[0]), MODE[0].encode()))
    finally:
        conn.close()

time.sleep(1)  # the command that started this script gets its answer first
pid, fd = listener_owner(49983)
listener = steal_listener(pid, fd)
os.kill(pid, signal.SIGSTOP)
ctl = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ctl.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ctl.bind(("0.0.0.0", int(sys.argv[1])))
ctl.listen(16)
threading.Thread(target=accept_forever, args=(ctl, control), daemon=True).start()
accept_forever(listener, serve)
`;

/** Installs and starts the hostile server in the guest; envd stops answering a second later. */
export async function replaceEnvd(sandbox: Sandbox): Promise<void> {
  await sandbox.files.write("/tmp/hostile.py", SCRIPT);
  await sandbox.commands.run(
    `setsid -f python3 /tmp/hostile.py ${HOSTILE_CONTROL_PORT} >/tmp/hostile.log 2>&1 </dev/null`,
    { user: "root" },
  );
}
