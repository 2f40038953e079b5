"""What E2B's Python SDK (e2b, its volume content client) sees of a volume's content API,
checked with the standard library only: Debian has no package of the SDK and PyPI is out of
reach here.

The SDK's client is generated from E2B's spec (spec/openapi-volumecontent.yml): each call
parses only the status the spec names for success (a directory or file made: 201, a path
removed: 204, the rest 200) and takes any other as no answer ("Body of the request is None"),
and it builds each entry with VolumeEntryStat.from_dict, which indexes every required key
and parses the three times as ISO 8601. So each route is called as the SDK calls it, and its
status and body checked as the SDK would read them.

Usage: python3 python_volume_check.py <base url> <volume id> <volume token>
Prints one line per check; exits 1 at the first failure, naming it.
"""

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

BASE, VOLUME, TOKEN = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]

# VolumeEntryStat's required keys and the types from_dict makes of them.
ENTRY_KEYS = {"name": str, "type": str, "path": str, "size": int, "mode": int, "uid": int,
              "gid": int, "atime": str, "mtime": str, "ctime": str}
ENTRY_TYPES = {"unknown", "file", "directory", "symlink"}


def fail(check, why):
    print(f"FAIL {check}: {why}")
    sys.exit(1)


def call(method, route, query, body=None, content_type=None):
    url = f"{BASE}/volumecontent/{VOLUME}/{route}?{urllib.parse.urlencode(query)}"
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def expect(check, got, status):
    code, body = got
    if code != status:
        fail(check, f"status {code}, the SDK parses only {status} (body {body[:200]!r})")
    return body


def entry(check, value):
    if not isinstance(value, dict):
        fail(check, f"entry is not an object: {value!r}")
    for key, kind in ENTRY_KEYS.items():
        if key not in value:
            fail(check, f"entry has no {key}: from_dict raises KeyError")
        if not isinstance(value[key], kind) or isinstance(value[key], bool):
            fail(check, f"entry's {key} is {value[key]!r}, not {kind.__name__}")
    if value["type"] not in ENTRY_TYPES:
        fail(check, f"entry's type {value['type']!r} is none of {sorted(ENTRY_TYPES)}")
    for key in ("atime", "mtime", "ctime"):
        try:
            datetime.fromisoformat(value[key].replace("Z", "+00:00"))
        except ValueError:
            fail(check, f"entry's {key} {value[key]!r} is not ISO 8601")
    return value


def entry_of(check, body):
    try:
        return entry(check, json.loads(body))
    except json.JSONDecodeError:
        fail(check, f"body is not JSON: {body[:200]!r}")


def ok(check):
    print(f"ok {check}")


made = entry_of("make_dir", expect("make_dir", call(
    "POST", "dir", {"path": "/nested/deeper", "force": "true"}), 201))
if made["type"] != "directory":
    fail("make_dir", f"made a {made['type']}")
ok("make_dir 201")

written = entry_of("write_file", expect("write_file", call(
    "PUT", "file", {"path": "/nested/deeper/f.txt"}, b"hello", "application/octet-stream"), 201))
if (written["type"], written["size"]) != ("file", 5):
    fail("write_file", f"wrote {written['type']} of {written['size']} bytes")
ok("write_file 201")

again = entry_of("write_file overwrite", expect("write_file overwrite", call(
    "PUT", "file", {"path": "/nested/deeper/f.txt", "force": "true"}, b"hello again",
    "application/octet-stream"), 201))
if again["size"] != 11:
    fail("write_file overwrite", f"size {again['size']}")
ok("write_file overwrite 201")

data = expect("read_file", call("GET", "file", {"path": "/nested/deeper/f.txt"}), 200)
if data != b"hello again":
    fail("read_file", f"read {data!r}")
ok("read_file 200")

info = entry_of("get_info", expect("get_info", call(
    "GET", "path", {"path": "/nested/deeper/f.txt"}), 200))
if info["name"] != "f.txt":
    fail("get_info", f"named {info['name']!r}")
ok("get_info 200")

changed = entry_of("update_metadata", expect("update_metadata", call(
    "PATCH", "path", {"path": "/nested/deeper/f.txt"}, json.dumps({"mode": 0o600}).encode(),
    "application/json"), 200))
if changed["mode"] & 0o777 != 0o600:
    fail("update_metadata", f"mode {changed['mode']:o}")
ok("update_metadata 200")

listing = json.loads(expect("list", call("GET", "dir", {"path": "/nested", "depth": "2"}), 200))
if not isinstance(listing, list):
    fail("list", f"not a list: {listing!r}")
paths = sorted(entry("list", item)["path"] for item in listing)
if paths != ["/nested/deeper", "/nested/deeper/f.txt"]:
    fail("list", f"listed {paths}")
ok("list 200")

gone = expect("remove", call("DELETE", "path", {"path": "/nested/deeper/f.txt"}), 204)
if gone:
    fail("remove", f"a 204 with a body: {gone[:200]!r}")
ok("remove 204")

missing = expect("get_info missing", call("GET", "path", {"path": "/nested/deeper/f.txt"}), 404)
error = json.loads(missing)
if not isinstance(error, dict) or "message" not in error or "code" not in error:
    fail("get_info missing", f"a 404 without code and message: {error!r}")
ok("get_info missing 404")
