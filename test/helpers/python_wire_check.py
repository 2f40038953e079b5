"""What E2B's Python SDK (e2b_code_interpreter) sees of a code interpreter, checked with the
standard library only: Debian has no package of the SDK and PyPI is out of reach here.

It speaks the wire as that SDK does (docs/code-interpreter-wire.md §8): every /execute body
carries all four keys with nulls, HTTP/1.1, one JSON object per line, `type` popped from
each, stdout/stderr callbacks given the wire's `timestamp`, results built with `**data`,
charts deserialized by indexing every key (a missing one makes the SDK drop the chart).

Usage: python3 python_wire_check.py <base url> [--access-token=<envd token>] [header:value ...]
The access token goes on /execute only, as the SDK sends it (X-Access-Token).
Prints one line per check; exits 1 at the first failure, naming it.
"""

import json
import sys
import urllib.error
import urllib.request

BASE = sys.argv[1].rstrip("/")
TOKEN_FLAG = "--access-token="
ACCESS_TOKEN = next((a[len(TOKEN_FLAG):] for a in sys.argv[2:] if a.startswith(TOKEN_FLAG)), None)
HEADERS = dict(arg.split(":", 1) for arg in sys.argv[2:] if not arg.startswith(TOKEN_FLAG))

# The keys the SDK's chart classes read without defaults, per chart type.
CHART_KEYS = {
    "line": ["title", "elements", "x_label", "y_label", "x_unit", "y_unit", "x_ticks", "y_ticks",
             "x_tick_labels", "y_tick_labels", "x_scale", "y_scale"],
    "scatter": ["title", "elements", "x_label", "y_label", "x_unit", "y_unit", "x_ticks",
                "y_ticks", "x_tick_labels", "y_tick_labels", "x_scale", "y_scale"],
    "bar": ["title", "elements", "x_label", "y_label", "x_unit", "y_unit"],
    "box_and_whisker": ["title", "elements", "x_label", "y_label", "x_unit", "y_unit"],
    "pie": ["title", "elements"],
    "superchart": ["title", "elements"],
    "unknown": ["title", "elements"],
}


def request(method, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for key, value in HEADERS.items():
        req.add_header(key, value)
    if ACCESS_TOKEN is not None and path == "/execute":
        req.add_header("X-Access-Token", ACCESS_TOKEN)
    return urllib.request.urlopen(req, timeout=timeout)


class Execution:
    def __init__(self):
        self.results, self.stdout, self.stderr = [], [], []
        self.error, self.execution_count = None, None


def run_code(code, language=None, context_id=None, envs=None, on_stdout=None):
    body = {"code": code, "context_id": context_id, "language": language, "env_vars": envs}
    execution = Execution()
    with request("POST", "/execute", body) as res:
        for raw in res:
            line = raw.decode()
            data = json.loads(line)  # a blank line raises here, as in the SDK
            kind = data.pop("type")
            if kind in ("stdout", "stderr"):
                (execution.stdout if kind == "stdout" else execution.stderr).append(data["text"])
                if on_stdout and kind == "stdout":
                    on_stdout(data["text"], data["timestamp"])
            elif kind == "result":
                check_chart(data.get("chart"))
                execution.results.append(data)
            elif kind == "error":
                execution.error = (data["name"], data["value"], data["traceback"])
            elif kind == "number_of_executions":
                execution.execution_count = data["execution_count"]
    return execution


def check_chart(chart):
    if not chart:
        return
    for key in CHART_KEYS[chart["type"]]:
        assert key in chart, f"chart {chart['type']} lacks '{key}': the SDK would drop it"
    if chart["type"] == "superchart":
        for child in chart["elements"]:
            check_chart(child)


def status_of(method, path, body=None):
    try:
        with request(method, path, body) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name} {detail}")
        sys.exit(1)
    print(f"ok {name}")


def main():
    first = run_code("x = 1; x")
    check("value", first.results[0]["text"] == "1" and first.results[0]["is_main_result"], first.results)
    check("extra present and empty", first.results[0].get("extra") == {}, first.results)
    stamps = []
    out = run_code("print('hello')", on_stdout=lambda text, ts: stamps.append((text, ts)))
    check("stdout with the wire timestamp", stamps and stamps[0][0] == "hello\n" and stamps[0][1], stamps)
    failed = run_code("echo 'E2B is awesome!'")
    check("syntax error", failed.error and failed.error[0] == "SyntaxError", failed.error)
    counted = run_code("!pwd")
    check("errors count as executions", counted.execution_count == failed.execution_count + 1)
    envs = run_code("import os; os.getenv('FOO')", envs={"FOO": "bar"})
    check("env_vars", envs.results[0]["text"] == "bar", envs.results)
    check("env_vars put back", run_code("import os; os.getenv('FOO', 'default')").results[0]["text"] == "default")
    plot = run_code(
        "import matplotlib.pyplot as plt\n"
        "fig, (a, b) = plt.subplots(1, 2)\n"
        "a.plot([1, 2, 3], [4, 5, 6]); b.scatter([1, 2], [3, 4])\n"
        "fig.suptitle('both')\n"
        "plt.show()"
    )
    chart = plot.results[0].get("chart")
    check("superchart with every key", chart and chart["type"] == "superchart", plot.results)
    latex = run_code("from IPython.display import display\ndisplay({'text/latex': r'\\frac{1}{2}'}, raw=True)")
    formats = [k for k in latex.results[0] if k not in ("is_main_result", "extra") and latex.results[0][k] is not None]
    check("raw latex only", formats == ["latex"], latex.results)
    created_status, created = status_of("POST", "/contexts", {})
    context = json.loads(created)
    check("context created", created_status == 200 and set(context) == {"id", "language", "cwd"}, created)
    js = run_code("1 + 1", language="js")
    check("javascript value", js.results[0]["text"] == "2", js.results)
    missing = status_of("POST", "/execute", {"code": "1", "context_id": "nope", "language": None, "env_vars": None})
    check("unknown context: 404 with text", missing == (404, "Context nope not found"), missing)
    removed = status_of("DELETE", f"/contexts/{context['id']}")
    check("context removed", removed == (200, "null"), removed)


main()
