"""Warren's Python kernel driver: runs one code-interpreter context's cells with IPython.

envd starts it in the context's cwd and speaks ../PROTOCOL.md with it: execute requests as
JSON lines on fd 0, events as JSON lines on fd 3. The driver takes fd 1 and fd 2 over (pipes
drained by a thread), so whatever a cell, its `!cmd`s and its child processes write becomes
stdout/stderr events of the execution that is running.

Only IPython is required. numpy, pandas, matplotlib (with matplotlib-inline) and PIL are
used when they are installed: each missing one turns its feature off.
"""

import base64
import codecs
import contextlib
import ctypes
import datetime
import fcntl
import functools
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback

# Until the driver is ready to interrupt cells, an interrupt must not kill it.
signal.signal(signal.SIGINT, signal.SIG_IGN)

try:
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.formatters import BaseFormatter, DisplayFormatter, JSONFormatter
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display
    from traitlets import ObjectName, Type, Unicode
    from traitlets.config import Config
except ImportError as missing:
    sys.stderr.write(f"warren_kernel: IPython is required: {missing}\n")
    sys.exit(1)

# warren_charts needs matplotlib: without it figures just get no e2b/chart. No .pyc of it
# next to the driver (a source tree, or a read-only drive).
_writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
try:
    import warren_charts
except Exception:
    warren_charts = None
finally:
    sys.dont_write_bytecode = _writes_bytecode

EVENTS_FD = 3
# envd refuses event lines over 64 MiB: a larger result loses its largest parts to fit.
MAX_EVENT_BYTES = 60 * 1024 * 1024
MAX_ERROR_CHARS = 1024 * 1024
# Bigger pipes mean fewer, larger output events for a big print.
PIPE_BYTES = 1024 * 1024
F_SETPIPE_SZ = 1031


def main():
    serve(prepare())


def prepare():
    """Everything that does not depend on the context: the shell, its formatters, the heavy
    imports. warren_zygote.py does this once and forks kernels from there."""
    shell = WarrenShell.instance(config=_shell_config())
    _install_formatters(shell)
    _warm_up(shell)
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = ""  # the cwd, as in an interactive Python (not this script's directory)
    sys.argv = [""]
    return shell


def serve(shell):
    """Runs the context's cells until fd 0 closes; never returns."""
    requests = _claim_stdio()
    interrupts = Interrupts()
    events = Events(EVENTS_FD, interrupts)
    output = Output(events, interrupts)
    shell.driver = Driver(shell, events, output, interrupts)
    events.emit({"type": "ready"})
    shell.driver.serve(requests)
    os._exit(0)  # fd 0 closed: envd is done with this context; user threads don't hold us


def _claim_stdio():
    """Keeps fd 0 (requests) and fd 3 (events) away from user code and child processes."""
    try:
        os.set_inheritable(EVENTS_FD, False)
    except OSError:
        sys.stderr.write(f"warren_kernel: fd {EVENTS_FD} (events) is not open\n")
        sys.exit(2)
    requests = os.fdopen(os.dup(0), "rb")  # os.dup makes a non-inheritable copy
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() and children read an empty stdin
    os.close(devnull)
    return requests


# --- events --------------------------------------------------------------------------------


class Events:
    """fd 3: one JSON line per event, lines whole even when several threads write."""

    def __init__(self, fd, interrupts):
        self._fd = fd
        self._interrupts = interrupts
        self._lock = threading.Lock()
        self._current = None  # the running execution's id; None between executions

    @property
    def current(self):
        return self._current

    def emit(self, event):
        self._write(_encode(event))

    def emit_current(self, make):
        """Emits make(id) (an event, or its encoded line) for the running execution;
        nothing between executions."""
        with self._interrupts.deferred(), self._lock:
            if self._current is not None:
                event = make(self._current)
                self._write_locked(event if isinstance(event, bytes) else _encode(event))

    def begin(self, id, first=None):
        """Starts an execution; `first` goes out before anything its output could send."""
        with self._interrupts.deferred(), self._lock:
            self._current = id
            if first is not None:
                self._write_locked(_encode(first))

    def end(self):
        with self._interrupts.deferred(), self._lock:
            id, self._current = self._current, None
            if id is not None:
                self._write_locked(_encode({"type": "done", "id": id}))

    def _write(self, line):
        with self._interrupts.deferred(), self._lock:
            self._write_locked(line)

    def _write_locked(self, line):
        view = memoryview(line)
        while view:
            try:
                written = os.write(self._fd, view)
            except BrokenPipeError:
                os._exit(1)  # envd is gone
            view = view[written:]


def _encode(event):
    return (_json(event) + "\n").encode("utf-8", "replace")


def _json(value):
    options = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
    try:
        return json.dumps(value, default=_json_default, **options)
    except ValueError:  # NaN or infinity somewhere: JSON has no such numbers
        return json.dumps(_plain(value), **options)


def _json_default(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    return str(value)


def _plain(value):
    """The value as plain JSON types, non-finite floats as null."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if value is None or isinstance(value, (str, int)):
        return value
    return _plain(_json_default(value))


# --- interrupts ----------------------------------------------------------------------------


class Interrupts:
    """SIGINT raises KeyboardInterrupt in the main thread while a cell runs, and never in
    the middle of an event line: there it waits for the line to be written."""

    def __init__(self):
        self._armed = False
        self._depth = 0
        self._pending = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def arm(self):
        self._pending = False
        self._armed = True

    def disarm(self):
        self._armed = False
        self._pending = False

    @contextlib.contextmanager
    def deferred(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers only ever run in the main thread
            return
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending and self._armed:
                self._pending = False
                raise KeyboardInterrupt

    def _on_sigint(self, signum, frame):
        if not self._armed:
            return  # idle, or between the cell and its `done`: nothing to stop
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt


# --- output capture ------------------------------------------------------------------------


class Output:
    """fd 1 and fd 2 become pipes drained by a thread into stdout/stderr events.

    sync() writes a sentinel into each pipe and waits for the thread to reach it: every
    byte written before the call, by anyone, has then been sent.
    """

    def __init__(self, events, interrupts):
        self._events = events
        self._interrupts = interrupts
        self._sentinel = b"\0\x1bwarren-sync-" + os.urandom(8).hex().encode() + b"\0"
        self._synced = threading.Condition()
        self._sending = threading.Lock()  # display() may sync from several threads
        self._streams = {}  # read end → _Stream
        _flush_python_streams()
        for fd, name in ((1, "stdout"), (2, "stderr")):
            read_end, write_end = os.pipe()
            with contextlib.suppress(OSError):
                fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_BYTES)
            os.dup2(write_end, fd)  # inheritable: child processes write here too
            # The driver keeps its own write end: sentinels get through whatever the cell
            # does to fd 1 and 2.
            self._streams[read_end] = _Stream(name, fd, write_end, self._sentinel)
        sys.stdout = sys.__stdout__ = _text_stream(1)
        sys.stderr = sys.__stderr__ = _text_stream(2)
        self._reader = threading.Thread(target=self._drain, name="warren-output", daemon=True)
        self._reader.start()

    def repair(self):
        """Reopens fd 1 and 2 (and sys.stdout/stderr) when a cell closed them."""
        for stream in self._streams.values():
            try:
                os.fstat(stream.fd)
            except OSError:
                os.dup2(stream.write_end, stream.fd)
        if getattr(sys.stdout, "closed", False):
            sys.stdout = _text_stream(1)
        if getattr(sys.stderr, "closed", False):
            sys.stderr = _text_stream(2)

    def sync(self):
        _flush_python_streams()
        targets = []
        for stream in self._streams.values():
            with self._interrupts.deferred(), self._sending:  # the sentinel written ⇔ counted
                _write_all(stream.write_end, self._sentinel)
                stream.sent += 1
                targets.append((stream, stream.sent))
        with self._synced:
            while any(stream.seen < sent for stream, sent in targets):
                if not self._reader.is_alive():
                    return
                self._synced.wait(0.5)

    def _drain(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # SIGINT is for the cell
        try:
            self._forward()
        except BaseException:
            # Output would silently stop: better a driver that dies and is started again.
            _log(f"the output thread failed:\n{traceback.format_exc()}")
            os._exit(1)

    def _forward(self):
        poller = select.poll()
        for fd in self._streams:
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                stream = self._streams[fd]
                text, syncs = stream.feed(os.read(fd, PIPE_BYTES))
                if text:
                    self._events.emit_current(
                        lambda id, s=stream.name, t=text: {"type": s, "id": id, "text": t}
                    )
                if syncs:  # after the text: what came before a sentinel is out first
                    with self._synced:
                        stream.seen += syncs
                        self._synced.notify_all()


class _Stream:
    def __init__(self, name, fd, write_end, sentinel):
        self.name = name
        self.fd = fd
        self.write_end = write_end
        self.sent = 0  # sentinels written (main thread)
        self.seen = 0  # sentinels read (reader thread, under Output._synced)
        self._sentinel = sentinel
        self._held = b""  # the start of what may be a sentinel, until more bytes come
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data):
        """The text in these bytes, sentinels removed, and how many sentinels there were."""
        parts = (self._held + data).split(self._sentinel)
        tail = parts[-1]
        keep = _sentinel_start(tail, self._sentinel)
        self._held = tail[len(tail) - keep :] if keep else b""
        parts[-1] = tail[: len(tail) - keep]
        return self._decoder.decode(b"".join(parts)), len(parts) - 1


def _sentinel_start(data, sentinel):
    """How many bytes at the end of data could begin a sentinel."""
    start = max(0, len(data) - len(sentinel) + 1)
    at = data.find(sentinel[:1], start)
    while at != -1:
        if sentinel.startswith(data[at:]):
            return len(data) - at
        at = data.find(sentinel[:1], at + 1)
    return 0


def _text_stream(fd):
    # Line-buffered like a terminal: a print reaches the pipe before a later `!cmd` writes.
    return open(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)


def _flush_python_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    if _libc is not None:  # C extensions' printf buffers
        with contextlib.suppress(Exception):
            _libc.fflush(None)


try:
    _libc = ctypes.CDLL(None)
except OSError:
    _libc = None


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --- the shell -----------------------------------------------------------------------------


class EventDisplayHook(DisplayHook):
    """The cell's value: a main result instead of an `Out[n]:` print."""

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        self.shell.publish_result(format_dict, main=True)

    def finish_displayhook(self):
        pass


class EventDisplayPublisher(DisplayPublisher):
    """display(), plt.show()…: results that are not the cell's value."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
        if not update:  # update_display has no counterpart in E2B's results
            self.shell.publish_result(data, main=False)

    def clear_output(self, wait=False):
        pass


class GuardedDisplayFormatter(DisplayFormatter):
    """Marks formatting, so that a formatter's failure is reported as text (Jupyter shows
    it and the cell carries on), not as the cell's error."""

    def format(self, obj, include=None, exclude=None):
        self.parent.formatting += 1
        try:
            return super().format(obj, include=include, exclude=exclude)
        finally:
            self.parent.formatting -= 1


class WarrenShell(InteractiveShell):
    displayhook_class = Type(EventDisplayHook)
    display_pub_class = Type(EventDisplayPublisher)
    driver = None  # set once the driver serves; before that, output goes to envd's log
    formatting = 0

    def init_display_formatter(self):
        self.display_formatter = GuardedDisplayFormatter(parent=self)
        self.configurables.append(self.display_formatter)

    def publish_result(self, data, main):
        if self.driver is not None:
            self.driver.publish(data, main)

    def _showtraceback(self, etype, evalue, stb):
        if self.driver is None:
            return None  # the warm-up's
        self.driver.report_error(etype, evalue, stb, formatting=self.formatting > 0)

    def enable_gui(self, gui=None):
        if gui not in (None, "inline"):
            print(f"No GUI event loop here ({gui}): figures show inline.", file=sys.stderr)

    def system(self, cmd):
        """`!cmd` writes straight to fd 1 and 2 (captured like any child process). An
        interrupt stops the command's process group and ends the cell with it."""
        cmd = self.var_expand(cmd, depth=1)
        shell = os.environ.get("SHELL") or "/bin/sh"
        child = subprocess.Popen(cmd, shell=True, executable=shell, start_new_session=True)
        try:
            status = child.wait()
        except KeyboardInterrupt:
            with self.driver.interrupts.deferred():
                _stop_group(child)
            raise
        # IPython's convention: a signal's death is its negative number.
        self.user_ns["_exit_code"] = -(status - 128) if status > 128 else status


def _stop_group(child):
    for sig, grace in ((signal.SIGINT, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            child.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _shell_config():
    config = Config()
    # History in memory only: contexts share HOME, and nothing reads it back.
    config.HistoryManager.enabled = False
    config.InteractiveShell.warn_venv = False
    return config


# --- formatters ----------------------------------------------------------------------------


class E2BDataFormatter(BaseFormatter):
    """`e2b/data`: a DataFrame's columns, the way E2B's SDKs read `result.data`."""

    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict,)


class E2BChartFormatter(BaseFormatter):
    """`e2b/chart`: a matplotlib figure's data (warren_charts)."""

    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict,)

    def __call__(self, obj):
        # Not a registered type printer: enabling the inline backend (`%matplotlib
        # inline` too) removes every formatter's printer for Figure.
        figure_module = sys.modules.get("matplotlib.figure")
        if self.enabled and figure_module is not None and isinstance(obj, figure_module.Figure):
            return _figure_chart(obj)
        return super().__call__(obj)


class PlainJSONFormatter(JSONFormatter):
    """`application/json` for a dict or list value too, as E2B's kernel gives it."""

    def __call__(self, obj):
        if isinstance(obj, (dict, list)):
            try:
                text = json.dumps(obj, default=_strict_json_default)
                if len(text) <= MAX_EVENT_BYTES:  # a larger one could not be sent anyway
                    return json.loads(text), {"expanded": True}
            except (TypeError, ValueError, RecursionError):
                pass  # something JSON cannot hold: no JSON for it
        return super().__call__(obj)


def _strict_json_default(value):
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(type(value).__name__)


def _install_formatters(shell):
    formatters = shell.display_formatter.formatters
    parent = shell.display_formatter
    data = E2BDataFormatter(parent=parent)
    data.for_type_by_name("pandas.core.frame", "DataFrame", _dataframe_data)
    formatters[data.format_type] = data
    if warren_charts is not None:
        chart = E2BChartFormatter(parent=parent)
        formatters[chart.format_type] = chart
    formatters["application/json"] = PlainJSONFormatter(parent=parent)


def _dataframe_data(frame):
    try:
        columns = frame.to_dict(orient="list")
    except Exception:
        return None
    return {
        (name if isinstance(name, str) else str(name)): [_data_cell(v) for v in values]
        for name, values in columns.items()
    }


def _data_cell(value):
    # pandas Timestamps are datetimes; NaT is not, and goes out as its text.
    return value.isoformat() if isinstance(value, datetime.datetime) else value


def _figure_chart(figure):
    try:
        return warren_charts.figure_to_chart(figure)
    except Exception:
        return {}  # an odd figure still shows; it has no chart data


# --- warm-up -------------------------------------------------------------------------------


def _warm_up(shell):
    """Loads the heavy optional libraries now, so that the first cell is fast."""
    for module in ("numpy", "pandas"):
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with contextlib.suppress(Exception):
        shell.enable_matplotlib("inline")
        _render_nothing()
    with contextlib.suppress(Exception):
        _install_pil_display()
    # A cell that fails: the first traceback loads its formatting machinery. Until the
    # driver serves, tracebacks are dropped.
    shell.run_cell("raise NameError('warm-up')", store_history=False, silent=True)
    for name in ("last_type", "last_value", "last_traceback"):
        sys.__dict__.pop(name, None)


def _render_nothing():
    """Draws a throwaway figure off pyplot: loads the fonts and the PNG writer once."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().set_title("warm-up")
    FigureCanvasAgg(figure).print_png(io.BytesIO())


def _install_pil_display():
    """Image.show() displays the image; Image.save(path) too, as in E2B's kernel."""
    from PIL import Image, ImageShow

    class DisplayViewer(ImageShow.Viewer):
        def show(self, image, **options):
            display(image)
            return 1

    ImageShow.register(DisplayViewer, order=-1)
    save = Image.Image.save

    @functools.wraps(save)
    def save_and_display(image, fp, format=None, **params):
        result = save(image, fp, format, **params)
        if isinstance(fp, (str, os.PathLike)):
            display(image)
        return result

    Image.Image.save = save_and_display


# --- the driver ----------------------------------------------------------------------------


class Driver:
    def __init__(self, shell, events, output, interrupts):
        self.shell = shell
        self.events = events
        self.output = output
        self.interrupts = interrupts
        self._count = 1
        self._globals = {}
        self._error_sent = False

    def serve(self, requests):
        for line in requests:
            try:
                request = json.loads(line)
            except ValueError:
                _log(f"not a JSON request: {line[:200]!r}")
                continue
            if not (isinstance(request, dict) and request.get("type") == "execute"):
                continue
            try:
                self.execute(request)
            except KeyboardInterrupt:
                pass  # a late SIGINT: the run is over
            except Exception:
                _log(f"an execution failed:\n{traceback.format_exc()}")

    def execute(self, request):
        id = str(request.get("id"))
        silent = request.get("silent") is True
        saved_env = self._apply_env(request)
        self.output.repair()
        self._error_sent = False
        first = None
        if not silent:
            first = {"type": "execution_count", "id": id, "count": self._count}
            self.shell.execution_count = self._count  # In[n]/Out[n] follow envd's count
            self._count += 1
        self.events.begin(id, first)
        try:
            self._run(str(request.get("code") or ""), silent)
        finally:
            self.interrupts.disarm()
            self.output.sync()
            _restore_env(saved_env)
            self.events.end()

    def _run(self, code, silent):
        result = None
        try:
            self.interrupts.arm()
            try:
                result = self.shell.run_cell(code, store_history=not silent, silent=silent)
            finally:
                self.interrupts.disarm()
        except KeyboardInterrupt:  # it came outside the cell's own code
            self._emit_error("KeyboardInterrupt", "", "")
        except Exception as fault:  # IPython or the driver failed
            self._emit_error(type(fault).__name__, _str(fault), traceback.format_exc())
        if result is not None and not result.success and not self._error_sent:
            # Errors IPython shows without a traceback (a UsageError: unknown %magic…).
            failure = result.error_before_exec or result.error_in_exec
            if failure is not None:
                self._emit_error(type(failure).__name__, _str(failure), "")

    def publish(self, data, main):
        if self.events.current is None:
            return
        try:
            bundle = _bundle_json({str(k): _mime_value(v) for k, v in data.items()})
        except Exception as fault:  # a value json cannot take (a cycle…)
            print(f"[a result could not be sent: {type(fault).__name__}: {fault}]", file=sys.stderr)
            return
        self.output.sync()  # what was printed before the display comes before it
        head = f'{{"type":"result","main":{"true" if main else "false"},"id":'
        self.events.emit_current(lambda id: f"{head}{_json(id)},\"data\":{bundle}}}\n".encode("utf-8", "replace"))

    def report_error(self, etype, evalue, stb, formatting):
        text = stb if isinstance(stb, str) else "\n".join(stb)
        if formatting or self._error_sent or self.events.current is None:
            # A display that failed to format, or a second error: the cell keeps going /
            # keeps its first error, and this one is shown as text.
            print(text, file=sys.stderr)
            return
        self._emit_error(etype.__name__, _str(evalue), text)

    def _emit_error(self, name, value, trace):
        self._error_sent = True
        self.output.sync()
        event = {"name": name, "value": value[:MAX_ERROR_CHARS], "traceback": trace[:MAX_ERROR_CHARS]}
        self.events.emit_current(lambda id: {"type": "error", "id": id, **event})

    def _apply_env(self, request):
        """Sets the sandbox's env vars (kept) and this run's own (returned, to undo after)."""
        new_globals = request.get("globals")
        if isinstance(new_globals, dict):
            for key in self._globals.keys() - new_globals.keys():
                os.environ.pop(key, None)
            for key, value in new_globals.items():
                _setenv(key, value)
            self._globals = dict(new_globals)
        env = request.get("env")
        env = env if isinstance(env, dict) else {}
        saved = {str(key): os.environ.get(str(key)) for key in env}
        for key, value in env.items():
            _setenv(key, value)
        return saved


def _restore_env(saved):
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            _setenv(key, value)


def _setenv(key, value):
    try:
        os.environ[str(key)] = str(value)
    except ValueError:  # "=" or NUL in it: no such variable can exist
        _log(f"env var {key!r} not set: invalid")


def _mime_value(value):
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _bundle_json(bundle):
    """The bundle as JSON, its largest representations left out if the event would not
    fit in envd's line bound."""
    encoded = _json(bundle)
    if _size(encoded) <= MAX_EVENT_BYTES:
        return encoded
    sizes = {key: _size(_json(value)) for key, value in bundle.items()}
    total = sum(sizes.values())
    for key in sorted(sizes, key=lambda k: (k == "text/plain", -sizes[k])):
        if total <= MAX_EVENT_BYTES:
            break
        print(f"[{key} left out of a result: {sizes[key]} bytes is too large]", file=sys.stderr)
        total -= sizes[key]
        del bundle[key]
    return _json(bundle)


def _size(text):
    """UTF-8 bytes of a text; counted only when it could matter."""
    return len(text) if len(text) * 4 <= MAX_EVENT_BYTES else len(text.encode("utf-8", "replace"))


def _str(exc):
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def _log(message):
    """The driver's own notes: on the stderr envd gave it, when that is still open."""
    with contextlib.suppress(OSError):
        os.write(_diagnostics, f"warren_kernel: {message}\n".encode("utf-8", "replace"))


try:
    _diagnostics = os.dup(2)  # taken before fd 2 becomes a pipe
except OSError:
    _diagnostics = -1


if __name__ == "__main__":
    try:
        main()
    except Exception:
        _log(f"failed:\n{traceback.format_exc()}")
        os._exit(1)
