"""Warren's Python zygote: warren_kernel's context-free start done once, kernels forked from it.

A kernel's start is mostly imports (IPython, numpy, pandas, matplotlib) and a first figure:
~1.5 s natively, ~35 s under TCG. The zygote does that once; each context's kernel is then a
fork() of it, sharing those pages until written. envd speaks with it as ../PROTOCOL.md's
"Zygote" section says: fork requests as JSON lines on fd 0, its events on fd 3. A forked
kernel connects to envd's unix socket (its path is argv[1]), sends its
token as its first line, and from there serves that one connection as its fd 0 and fd 3.
"""

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
import warnings

EVENTS_FD = 3
MAX_REQUEST_BYTES = 1024 * 1024

# No .pyc next to the driver (a source tree, or a read-only drive).
_writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
try:
    import warren_kernel
finally:
    sys.dont_write_bytecode = _writes_bytecode


def main():
    if len(sys.argv) != 2 or not sys.argv[1]:
        sys.stderr.write("usage: warren_zygote.py <envd's kernel socket>\n")
        sys.exit(2)
    address = sys.argv[1]
    os.set_inheritable(EVENTS_FD, False)
    shell = warren_kernel.prepare()
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is what wakes the loop
    _emit({"type": "ready"})
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_read], [], [])
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_read, 512):
                    pass
            _reap()
        if 0 in readable:
            data = os.read(0, 65536)
            if not data:
                os._exit(0)  # envd is done with the zygote; its kernels live on
            pending += data
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_REQUEST_BYTES:
                warren_kernel._log("zygote: a request line is too long; dropped")
                pending = b""
            for line in lines:
                _fork(line, shell, address, (wake_read, wake_write))


def _fork(line, shell, address, wake):
    try:
        request = json.loads(line)
        token, cwd, env = request["token"], request["cwd"], request["env"]
        if not (isinstance(token, str) and isinstance(cwd, str) and isinstance(env, dict)):
            raise TypeError("token, cwd and env must be a string, a string and an object")
    except (ValueError, KeyError, TypeError) as bad:
        warren_kernel._log(f"zygote: not a fork request ({bad}): {line[:200]!r}")
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded": BLAS's threads
        pid = os.fork()
    if pid == 0:
        try:
            _become_kernel(shell, address, token, cwd, env, wake)
        except BaseException:
            warren_kernel._log(f"a forked kernel failed to start:\n{traceback.format_exc()}")
        os._exit(1)
    _emit({"type": "forked", "token": token, "pid": pid})


def _become_kernel(shell, address, token, cwd, env, wake):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wake:
        os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    for key, value in env.items():
        warren_kernel._setenv(key, value)
    with contextlib.suppress(Exception):
        shell.history_manager.dir_hist[:] = [os.getcwd()]  # `_dh`, `%cd -`
    _as_if_started_now(env)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # its global generator was seeded once, in the zygote
        with contextlib.suppress(Exception):
            numpy.random.seed()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(address)
    connection.sendall((json.dumps({"token": token}) + "\n").encode("ascii"))
    fd = connection.detach()
    os.dup2(fd, 0)
    os.dup2(fd, EVENTS_FD)
    os.close(fd)
    warren_kernel.serve(shell)


def _as_if_started_now(env):
    """sys.path as a python started now with `env` would have it: PYTHONPATH's entries after
    the cwd, and site directories made since the zygote started (a `pip install`'s)."""
    entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[1:1] = [entry for entry in entries if entry not in sys.path]
    with contextlib.suppress(Exception):
        import site

        directories = list(site.getsitepackages())
        if site.ENABLE_USER_SITE:
            directories.insert(0, site.getusersitepackages())
        for directory in directories:
            if directory not in sys.path and os.path.isdir(directory):
                site.addsitedir(directory)
    importlib.invalidate_caches()


def _reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if os.WIFSIGNALED(status):
            try:
                how = signal.Signals(os.WTERMSIG(status)).name
            except ValueError:  # a real-time signal: no name
                how = f"signal {os.WTERMSIG(status)}"
        else:
            how = f"status {os.waitstatus_to_exitcode(status)}"
        _emit({"type": "exited", "pid": pid, "how": f"exited ({how})"})


def _emit(event):
    warren_kernel._write_all(EVENTS_FD, warren_kernel._encode(event))


if __name__ == "__main__":
    try:
        main()
    except Exception:
        warren_kernel._log(f"zygote failed:\n{traceback.format_exc()}")
        os._exit(1)
