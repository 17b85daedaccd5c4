#!/usr/bin/env python3
"""Manual probe of the three wire servers, with the requests object_store 0.13.2 makes.

    python3 crates/wire-servers/probe.py [gcs] [azure] [http]

Installs nothing: run install-gcs.sh, install-azure.sh and install-http.sh first
(it runs them to find the binaries). For each server it starts it on 127.0.0.1
the way src/{gcs,azure,http}.rs do, over a fresh temporary folder, then:
uploads an object (the way the tests would), and sends object_store's requests
for a ranged GET, a range running past the end, a range starting past the end,
a suffix range, HEAD, LIST (recursive and with a delimiter), DELETE and a GET
after it, and a request with wrong or no credentials; prints status and the
headers object_store reads; stops the server (SIGKILL) and checks that the port
is closed. Standard library only. Exits non-zero if an expectation fails.
"""

import base64
import hashlib
import hmac
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from email.utils import formatdate

HERE = os.path.dirname(os.path.abspath(__file__))
OBJ = bytes(range(256)) * 40  # 10240 bytes
SIZE = len(OBJ)
HEADERS_SHOWN = ("content-length", "content-range", "etag", "last-modified", "x-ms-error-code",
                 "x-goog-generation", "transfer-encoding")
failures = []


def install(script):
    out = subprocess.run(["bash", os.path.join(HERE, script)], check=True, stdout=subprocess.PIPE)
    return out.stdout.decode().strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv, announce=None, port=None):
        self.log = []
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.port = port
        found = threading.Event()

        def drain():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                self.log.append(line)
                if announce and not found.is_set():
                    m = re.search(announce, line)
                    if m:
                        self.port = int(m.group(1))
                        found.set()
        threading.Thread(target=drain, daemon=True).start()
        deadline = time.time() + 30
        if announce:
            while not found.wait(0.05):
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("server did not announce its port:\n" + "\n".join(self.log))
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("server does not accept connections:\n" + "\n".join(self.log))
                time.sleep(0.02)
        self.started = time.time()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return "port still open"
        except OSError:
            return "connection refused after SIGKILL"


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h = dict(headers or {})
    if body is not None:
        h.setdefault("Content-Length", str(len(body)))
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def show(label, res, expect_status=None, expect_body=None):
    status, headers, data = res
    shown = ", ".join(f"{k}: {headers[k]}" for k in HEADERS_SHOWN if k in headers)
    print(f"  {label:<34} {status}  {shown}")
    if expect_status is not None and status != expect_status:
        failures.append(f"{label}: status {status}, expected {expect_status}")
    if expect_body is not None and data != expect_body:
        failures.append(f"{label}: body of {len(data)} bytes differs")
    return res


def ranges(port, url, extra=None):
    """object_store's GetRange forms, as it formats them."""
    h = dict(extra or {})
    show("GET Range: bytes=100-199", request(port, "GET", url, headers={**h, "Range": "bytes=100-199"}),
         206, OBJ[100:200])
    show("GET Range: bytes=10000-20000", request(port, "GET", url, headers={**h, "Range": "bytes=10000-20000"}),
         206, OBJ[10000:])
    show("GET Range: bytes=20000-20010", request(port, "GET", url, headers={**h, "Range": "bytes=20000-20010"}),
         416)
    show("GET Range: bytes=10200-", request(port, "GET", url, headers={**h, "Range": "bytes=10200-"}),
         206, OBJ[10200:])
    show("GET Range: bytes=-100 (suffix)", request(port, "GET", url, headers={**h, "Range": "bytes=-100"}))
    show("HEAD", request(port, "HEAD", url, headers=h), 200)


# --- GCS: fake-gcs-server ----------------------------------------------------

def probe_gcs():
    binary = install("install-gcs.sh")
    tmp = tempfile.mkdtemp(prefix="wire-gcs-")
    os.makedirs(f"{tmp}/seed/data")  # an empty folder under -data: an empty bucket
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    srv = Server([binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                  "-public-host", f"127.0.0.1:{port}", "-external-url", base,
                  "-backend", "filesystem", "-filesystem-root", f"{tmp}/storage",
                  "-data", f"{tmp}/seed", "-log-level", "info"],
                 announce=r"server started at http://127\.0\.0\.1:(\d+)")
    print(f"fake-gcs-server on {base}, root {tmp} (started)")
    key = "t/region=north/file_00.parquet"
    enc = urllib.parse.quote(key, safe="")  # object_store: NON_ALPHANUMERIC percent-encoding
    url = f"/data/{enc}"
    show("PUT /data/<key> (object_store put)", request(port, "PUT", url, OBJ))
    show("POST upload?uploadType=media (JSON)",
         request(port, "POST", f"/upload/storage/v1/b/data/o?uploadType=media&name={enc}", OBJ,
                 {"Content-Type": "application/octet-stream"}), 200)
    ranges(port, url)
    r = show("GET /data?list-type=2&prefix=t/", request(port, "GET", "/data?list-type=2&prefix=t%2F"), 200)
    print("    ", r[2].decode()[:400])
    r = show("  ... &delimiter=/", request(port, "GET", "/data?list-type=2&prefix=t%2F&delimiter=%2F"), 200)
    print("    ", r[2].decode()[:400])
    show("DELETE /data/<key>", request(port, "DELETE", url), 200)
    show("GET after DELETE", request(port, "GET", url, headers={"Range": "bytes=0-9"}), 404)
    show("GET with a bogus bearer token", request(port, "GET", "/data?list-type=2",
                                                  headers={"Authorization": "Bearer nonsense"}))
    print("  stop:", srv.kill())
    shutil.rmtree(tmp)


# --- Azure: Azurite -------------------------------------------------------------

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def shared_key(method, path, query, headers, key=ACCOUNT_KEY):
    """object_store 0.13.2's azure/credential.rs string_to_sign, in Python."""
    h = {k.lower(): v for k, v in headers.items()}
    length = h.get("content-length", "")
    length = "" if length == "0" else length
    fields = [method, h.get("content-encoding", ""), h.get("content-language", ""), length,
              h.get("content-md5", ""), h.get("content-type", ""), h.get("date", ""),
              h.get("if-modified-since", ""), h.get("if-match", ""), h.get("if-none-match", ""),
              h.get("if-unmodified-since", ""), h.get("range", "")]
    canon_headers = "".join(f"{k}:{v}\n" for k, v in sorted(h.items()) if k.startswith("x-ms"))
    resource = f"/{ACCOUNT}{path}\n"
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    for name in sorted({k for k, _ in pairs}):
        resource += f"{name.lower()}:{','.join(sorted(v for k, v in pairs if k == name))}\n"
    to_sign = "\n".join(fields) + "\n" + canon_headers + resource[:-1]
    mac = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    return f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}"


def azure(port, method, path, query="", body=None, extra=None, key=ACCOUNT_KEY):
    headers = {"x-ms-version": "2023-11-03", "Date": formatdate(usegmt=True)}
    if body is not None:
        headers["Content-Length"] = str(len(body))
    headers.update(extra or {})
    if key:
        headers["Authorization"] = shared_key(method, path, query, headers, key)
    return request(port, method, path + ("?" + query if query else ""), body, headers)


# An account SAS for devstoreaccount1's well-known key (blob service, container
# and object level, rwdlac, until 2099): lets a client without HMAC code create
# containers. src/azure.rs carries the same string.
CONTAINER_SAS = ("sv=2023-11-03&ss=b&srt=co&sp=rwdlac&st=2020-01-01T00%3A00%3A00Z"
                 "&se=2099-12-31T23%3A59%3A59Z&spr=https%2Chttp"
                 "&sig=%2BMDx65m%2Bv4ZvK0WJ%2BWLdj%2F2X4aWX80c%2BEoII6tI7JJQ%3D")


def probe_azure():
    launcher = install("install-azure.sh")
    tmp = tempfile.mkdtemp(prefix="wire-azure-")
    srv = Server([launcher, "--blobHost", "127.0.0.1", "--blobPort", "0", "--location", tmp,
                  "--disableTelemetry", "--silent"],
                 announce=r"listens on http://127\.0\.0\.1:(\d+)")
    port = srv.port
    print(f"Azurite blob on http://127.0.0.1:{port}/{ACCOUNT}, location {tmp}")
    show("PUT container (account SAS)", request(port, "PUT", f"/{ACCOUNT}/data?restype=container&{CONTAINER_SAS}",
                                                b""), 201)
    show("PUT container again (SAS)", request(port, "PUT", f"/{ACCOUNT}/data?restype=container&{CONTAINER_SAS}",
                                              b""), 409)
    url = f"/{ACCOUNT}/data/t/region=north/file_00.parquet"
    show("PUT blob (SharedKey, like put)", azure(port, "PUT", url, body=OBJ,
                                                 extra={"x-ms-blob-type": "BlockBlob"}), 201)
    for label, rng, status, body in [
            ("GET Range: bytes=100-199", "bytes=100-199", 206, OBJ[100:200]),
            ("GET Range: bytes=10000-20000", "bytes=10000-20000", 206, OBJ[10000:]),
            ("GET Range: bytes=20000-20010", "bytes=20000-20010", 416, None),
            ("GET Range: bytes=10200-", "bytes=10200-", 206, OBJ[10200:]),
            ("GET Range: bytes=-100 (suffix)", "bytes=-100", None, None)]:
        show(label, azure(port, "GET", url, extra={"Range": rng}), status, body)
    show("HEAD", azure(port, "HEAD", url), 200)
    r = show("LIST restype=container&comp=list", azure(port, "GET", f"/{ACCOUNT}/data",
                                                      "restype=container&comp=list&prefix=t/"), 200)
    print("    ", r[2].decode()[:300], "...")
    r = show("  ... &delimiter=/", azure(port, "GET", f"/{ACCOUNT}/data",
                                         "restype=container&comp=list&prefix=t/&delimiter=/"), 200)
    print("    ", r[2].decode()[:400])
    wrong = base64.b64encode(b"not the key" * 4).decode()
    show("GET with a wrong key", azure(port, "GET", url, key=wrong), 403)
    show("GET unsigned", azure(port, "GET", url, key=None), 403)
    show("DELETE", azure(port, "DELETE", url), 202)
    show("GET after DELETE", azure(port, "GET", url, extra={"Range": "bytes=0-9"}), 404)
    print("  stop:", srv.kill())
    shutil.rmtree(tmp)


# --- HTTP: rclone serve webdav --------------------------------------------------

def probe_http():
    binary = install("install-http.sh")
    tmp = tempfile.mkdtemp(prefix="wire-http-")
    srv = Server([binary, "serve", "webdav", tmp, "--addr", "127.0.0.1:0", "--config", "/dev/null",
                  "--dir-cache-time", "1ms", "--poll-interval", "0"],
                 announce=r"started on \[?http://127\.0\.0\.1:(\d+)")
    port = srv.port
    print(f"rclone serve webdav on http://127.0.0.1:{port}/, root {tmp}")
    url = "/t/region=north/file_00.parquet"
    # object_store's HttpStore put: PUT; on 409/404 MKCOL the parents from the
    # deepest up until one succeeds, then down again; then PUT once more.
    show("PUT (no parent folder)", request(port, "PUT", url, OBJ), 409)
    show("MKCOL /t/region=north", request(port, "MKCOL", "/t/region=north"), 409)
    show("MKCOL /t", request(port, "MKCOL", "/t"), 201)
    show("MKCOL /t/region=north", request(port, "MKCOL", "/t/region=north"), 201)
    show("PUT", request(port, "PUT", url, OBJ), 201)
    ranges(port, url)
    show("HEAD on a folder", request(port, "HEAD", "/t/region=north"))
    for depth in ["0", "1", "infinity"]:
        r = show(f"PROPFIND /t Depth: {depth}", request(port, "PROPFIND", "/t", headers={"Depth": depth}), 207)
        hrefs = re.findall(r"<D:href>([^<]*)</D:href>", r[2].decode())
        print("     hrefs:", hrefs)
    show("PROPFIND missing Depth: infinity", request(port, "PROPFIND", "/nope", headers={"Depth": "infinity"}), 404)
    show("DELETE", request(port, "DELETE", url), 204)
    show("GET after DELETE", request(port, "GET", url, headers={"Range": "bytes=0-9"}), 404)
    print("  stop:", srv.kill())
    shutil.rmtree(tmp)


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["gcs", "azure", "http"]
    for name in chosen:
        print(f"=== {name}")
        {"gcs": probe_gcs, "azure": probe_azure, "http": probe_http}[name]()
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("all expectations met")
