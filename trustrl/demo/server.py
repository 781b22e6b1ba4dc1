"""The demo server: http.server's ThreadingHTTPServer, GET only, every path checked.

Routes (everything else is 404; methods other than GET/HEAD are 405):

    /  /clip  /kepoch  /natural  /dashboard      the pages (static/*.html)
    /static/<file>                               a file shipped in trustrl/demo/static/
    /api/runs                                    the runs under the runs root
    /api/runs/<run>/info                         config, status, evaluations, action space
    /api/runs/<run>/metrics?since=I              metrics.csv rows from index I (complete lines)
    /api/runs/<run>/episodes?since=I             the same for episodes.csv
    /files/<run>/<file>                          a run's config/status/eval/csv/png, read-only
    /api/kepoch?K=&N=&eps=&seed=&iterations=     trustrl's Python K-epoch demo, for checking
    /api/clip?adv=&rho=&eps=                     trustrl's clip objective value and slope
    /api/natural?theta=&delta=&lr=               trustrl's natural and plain steps

<run> is one or two path segments under the runs root. No endpoint writes a file, runs code
from a request or a run folder, or starts training. A bad parameter is a 400 with a one-line
JSON message, a path outside what we serve is a 404 (traversal included; every file served,
the API's included, must resolve to a regular file inside the runs root, or inside static/ for
the pages), and when the server listens on a loopback address it only answers requests whose
Host is a loopback name (so a web page elsewhere cannot reach it through DNS rebinding).

Bounds (the defaults below; make_server takes others): a connection must deliver its whole
request head within REQUEST_TIMEOUT seconds (a total deadline, not per read, so a client that
trickles bytes is dropped too) and a response write gets as long. Request heads are read by
one thread for all connections (a selector), so a slow or idle client holds a socket, not a
handler: at most MAX_PENDING_PER_ADDRESS connections of one address wait for their head (a new
one closes that address's oldest: a browser's next request gets in however many slow
connections the same address holds), MAX_PENDING of all addresses (a new one closes the oldest
of the address holding most). A complete request goes to a handler thread; at most
MAX_CONNECTIONS are handled at once, and one more is answered 503 at once. At most
MAX_COMPUTATIONS of /api/kepoch, /api/clip and /api/natural compute at once, and one that
waits more than COMPUTE_WAIT seconds for its turn is answered 503. The costliest request,
/api/kepoch at K=100, N=256, iterations=30, takes about half a second of CPU.

Standard library only at import time; numpy/torch are imported by the /api/kepoch, /api/clip
and /api/natural handlers on first use.
"""

from __future__ import annotations

import io
import ipaddress
import json
import mimetypes
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from trustrl.demo import runfiles
from trustrl.demo.params import BadRequest, Busy, NotFound, Param, parse_query
from trustrl.util.errors import TrustrlError

STATIC_DIR = Path(__file__).resolve().parent / "static"
PAGES = {"": "index.html", "clip": "clip.html", "kepoch": "kepoch.html",
         "natural": "natural.html", "dashboard": "dashboard.html"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

REQUEST_TIMEOUT = 10.0  # seconds for a connection to deliver its request (and for the reply)
MAX_CONNECTIONS = 64  # complete requests handled at once (one thread each); more: 503
MAX_PENDING_PER_ADDRESS = 128  # connections of one address waiting for their request head
MAX_PENDING = 512  # of all addresses (each holds one file descriptor)
MAX_HEAD = 65536 + 100 * 1024  # bytes of a request head read before a handler takes over
MAX_COMPUTATIONS = 2  # /api/kepoch, /api/clip, /api/natural computing at once
COMPUTE_WAIT = 5.0  # seconds a computation waits for its turn before a 503

# iterations at most 30: the K-epoch page stops at 30 (kepoch.js MAX_ITER) and its check asks
# for the iterations shown; 30 bounds the costliest request to about 0.5 s of CPU.
KEPOCH_PARAMS = {"K": Param("int", 1, 100, 40), "N": Param("int", 1, 256, 12),
                 "eps": Param("float", 0.01, 0.5, 0.2), "seed": Param("int", 0, 2**32 - 1, 1),
                 "iterations": Param("int", 0, 30, 1), "lr": Param("float", 0.001, 10.0, 1.0)}
CLIP_PARAMS = {"adv": Param("float", -100.0, 100.0), "rho": Param("float", 0.0, 10.0),
               "eps": Param("float", 0.01, 0.5, 0.2)}
NATURAL_PARAMS = {"theta": Param("float", -20.0, 20.0), "delta": Param("float", 1e-5, 1.0, 0.01),
                  "lr": Param("float", 0.0, 100.0, 1.0)}
POLL_PARAM = Param("int", 200, 60000, 2000)
PAGE_PARAMS = {
    "clip": {"eps": CLIP_PARAMS["eps"], "rho": Param("float", 0.0, 2.0, 1.3)},
    "kepoch": {k: KEPOCH_PARAMS[k] for k in ("K", "N", "eps", "seed")},
    "natural": {"theta": Param("float", -10.0, 10.0, 0.0), "delta": Param("float", 0.001, 0.1,
                                                                         0.01),
                "lr": Param("float", 0.0, 10.0, 1.0)},
}
SINCE_PARAMS = {"since": Param("int", 0, 10**9, 0)}
NO_PARAMS: dict[str, Param] = {}

MIME = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
        ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
        ".json": "application/json", ".csv": "text/csv; charset=utf-8"}


def static_files() -> frozenset[str]:
    """Names of the files shipped in static/ (the only ones /static/ serves)."""
    if not STATIC_DIR.is_dir():
        return frozenset()
    return frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Slot:
    """One held connection slot of a BoundedSemaphore, given back at most once (the accepting
    thread and the connection's thread may both try when Ctrl-C interrupts a thread's start)."""

    def __init__(self, sem: threading.BoundedSemaphore):
        self._sem, self._lock, self._held = sem, threading.Lock(), True

    def release(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._sem.release()


@dataclass
class _Pending:
    """A connection whose request head has not all arrived."""

    address: str
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class _HeadReader:
    """One thread that reads the request heads of all new connections (non-blocking, under a
    selector) and hands each complete one to `dispatch(sock, client_address, head, deadline)`;
    a connection past its deadline, closed by its client or evicted by the bounds is closed."""

    def __init__(self, dispatch: Any, per_address: int, total: int):
        self._dispatch, self.per_address, self.total = dispatch, per_address, total
        self._selector = selectors.DefaultSelector()
        self._pending: OrderedDict[socket.socket, _Pending] = OrderedDict()  # oldest first
        self._addresses: dict[socket.socket, Any] = {}
        self._new: list[tuple[socket.socket, Any, float]] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="demo-heads")
        self._thread.start()

    def add(self, sock: socket.socket, client_address: Any, deadline: float) -> None:
        """From the accepting thread: a new connection to read the head of."""
        with self._lock:
            self._new.append((sock, client_address, deadline))
        try:
            self._wake_w.send(b"x")
        except OSError:  # the wake-up pipe is full: the loop is awake anyway
            pass

    def pending(self, address: str | None = None) -> int:
        """Connections waiting for their head (of `address`)."""
        with self._lock:
            return sum(1 for p in self._pending.values()
                       if address is None or p.address == address)

    def stop(self) -> None:
        self._stopped = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5)

    # --- the loop (its own thread) -----------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stopped:
                self._take_new()
                now = time.monotonic()
                for sock in [s for s, p in self._pending.items() if p.deadline <= now]:
                    self._drop(sock)
                wait = min((p.deadline for p in self._pending.values()), default=now + 1.0)
                for key, _ in self._selector.select(max(0.0, min(wait - now, 1.0))):
                    if key.fileobj is self._wake_r:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except OSError:
                            pass
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
        finally:
            for sock in list(self._pending):
                self._drop(sock)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _take_new(self) -> None:
        with self._lock:
            new, self._new = self._new, []
        for sock, client_address, deadline in new:
            address = str(client_address[0]) if client_address else ""
            mine = [s for s, p in self._pending.items() if p.address == address]
            if len(mine) >= self.per_address:
                self._drop(mine[0])  # this address's oldest
            elif len(self._pending) >= self.total:
                counts: dict[str, int] = {}
                for p in self._pending.values():
                    counts[p.address] = counts.get(p.address, 0) + 1
                most = max(counts, key=counts.__getitem__)
                self._drop(next(s for s, p in self._pending.items() if p.address == most))
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                self._close(sock)
                continue
            with self._lock:
                self._pending[sock] = _Pending(address, deadline)
            self._addresses[sock] = client_address

    def _read(self, sock: socket.socket) -> None:
        pending = self._pending.get(sock)
        if pending is None:
            return
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sock)
            return
        if not data:  # the client closed before its request was complete
            self._drop(sock)
            return
        pending.head += data
        if b"\r\n\r\n" in pending.head or b"\n\n" in pending.head or \
                len(pending.head) >= MAX_HEAD:
            self._forget(sock)
            client_address = self._addresses.pop(sock, None)
            try:
                self._dispatch(sock, client_address, bytes(pending.head), pending.deadline)
            except Exception:  # noqa: BLE001 - a bug: this connection, not the reader, ends
                traceback.print_exc(file=sys.stderr)
                self._close(sock)

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._pending.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass

    def _drop(self, sock: socket.socket) -> None:
        self._forget(sock)
        self._addresses.pop(sock, None)
        self._close(sock)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        try:
            sock.close()
        except OSError:
            pass


class DemoServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows the runs root and whether it listens on loopback only,
    and bounds its connections (one thread each) and its computations."""

    daemon_threads = True
    block_on_close = False  # Ctrl-C does not wait for idle clients: the threads are daemons
    request_queue_size = 128  # a burst of connections is accepted (and answered), not dropped

    def __init__(self, host: str, port: int, runs_root: Path, log_requests: bool = False, *,
                 request_timeout: float = REQUEST_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS,
                 max_computations: int = MAX_COMPUTATIONS, compute_wait: float = COMPUTE_WAIT,
                 max_pending_per_address: int = MAX_PENDING_PER_ADDRESS,
                 max_pending: int = MAX_PENDING):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.runs_root = Path(runs_root).resolve()
        self.loopback_only = is_loopback(host)
        self.log_requests = log_requests
        self.static = static_files()
        self.request_timeout = float(request_timeout)
        self.max_connections = int(max_connections)
        self.compute_wait = float(compute_wait)
        self._connections = threading.BoundedSemaphore(self.max_connections)
        self._computations = threading.BoundedSemaphore(int(max_computations))
        self._heads_lock = threading.Lock()
        self._heads: dict[socket.socket, tuple[bytes, float]] = {}
        super().__init__((host.strip("[]"), port), DemoHandler)
        self.head_reader = _HeadReader(self._handle_head, int(max_pending_per_address),
                                       int(max_pending))

    def server_close(self) -> None:
        super().server_close()
        if hasattr(self, "head_reader"):
            self.head_reader.stop()

    # --- the bounds on connections ----------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        """The request head is read by the head reader (no thread per waiting client)."""
        self.head_reader.add(request, client_address, time.monotonic() + self.request_timeout)

    def _handle_head(self, request: Any, client_address: Any, head: bytes,
                     deadline: float) -> None:
        """A complete request head: one thread to handle it while fewer than max_connections
        are handled; otherwise a 503 from this (the head reader's) thread."""
        try:
            request.setblocking(True)
        except OSError:
            self.shutdown_request(request)
            return
        if not self._connections.acquire(blocking=False):
            self._refuse(request)
            return
        with self._heads_lock:
            self._heads[request] = (head, deadline)
        slot = _Slot(self._connections)
        t = threading.Thread(target=self._serve_connection, args=(request, client_address, slot),
                             daemon=self.daemon_threads)
        try:
            t.start()
        except Exception:
            # e.g. no thread to be had; or start() failed after the thread began to run, and
            # then it gives the slot back too: the slot is given back once either way, and
            # the head reader (this thread) goes on
            slot.release()
            if t.ident is None:  # it never ran: the connection is ours to close
                self.take_head(request)
                self.shutdown_request(request)

    def _serve_connection(self, request: Any, client_address: Any, slot: _Slot) -> None:
        """socketserver.ThreadingMixIn.process_request_thread, then the slot given back."""
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.take_head(request)
            self.shutdown_request(request)
            slot.release()

    def take_head(self, request: Any) -> tuple[bytes, float]:
        """The request head the head reader read for this connection, and its deadline."""
        with self._heads_lock:
            return self._heads.pop(request, (b"", time.monotonic() + self.request_timeout))

    def _refuse(self, request: socket.socket) -> None:
        body = json.dumps({"error": f"server busy: {self.max_connections} connections are "
                           "open; try again", "status": 503}).encode()
        head = ("HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n"
                "Cache-Control: no-store\r\n\r\n").encode()
        try:
            request.setblocking(False)  # never wait on this client: a short reply fits the
            request.send(head + body)  # socket buffer of a new connection
            request.recv(65536)  # what has arrived of the request: read, so close sends FIN
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection the client broke or let time out is not a server error: no traceback
        (printed with --log-requests); anything else is, and is printed."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            if self.log_requests:
                print(f"{client_address[0]} - connection dropped: {exc!r}", file=sys.stderr)
            return
        super().handle_error(request, client_address)

    # --- the bound on computations ----------------------------------------------------------
    @contextmanager
    def computation(self) -> Iterator[None]:
        """Hold one of the max_computations slots, or Busy after compute_wait seconds."""
        if not self._computations.acquire(timeout=self.compute_wait):
            raise Busy("server busy: too many computations at once; try again")
        try:
            yield
        finally:
            self._computations.release()

    @property
    def url(self) -> str:
        raw, port = self.server_address[0], self.server_address[1]
        host = raw.decode() if isinstance(raw, bytes) else str(raw)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side with one deadline for all reads: each recv may only wait for
    what is left of it (then TimeoutError, which http.server answers by closing)."""

    def __init__(self, sock: socket.socket, deadline: float, write_timeout: float,
                 head: bytes = b""):
        super().__init__()
        self._sock, self._deadline, self._write_timeout = sock, deadline, write_timeout
        self._head = memoryview(head)  # what the head reader has read already

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if len(self._head):
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buf)
        finally:
            self._sock.settimeout(self._write_timeout)  # the reply gets the whole timeout


class DemoHandler(BaseHTTPRequestHandler):
    server: DemoServer
    server_version = "trustrl-demo"
    sys_version = ""

    # --- plumbing ---------------------------------------------------------------------------
    def setup(self) -> None:
        """The connection's socket timeout (it bounds each write) and the request deadline."""
        self.timeout = self.server.request_timeout
        super().setup()
        self.rfile.close()
        head, deadline = self.server.take_head(self.connection)
        self.rfile = io.BufferedReader(_DeadlineReader(
            self.connection, deadline, self.timeout, head))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.log_requests:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if content_type.startswith("text/html"):
            self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any, head: bool) -> None:
        body = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
        self._send(status, body, "application/json", head)

    def _error(self, status: HTTPStatus, message: str, head: bool) -> None:
        self._json(status, {"error": message, "status": int(status)}, head)

    def _file(self, root: Path, path: Path, head: bool) -> None:
        """path, read only if it resolves to a regular file inside root (else NotFound)."""
        ctype = MIME.get(path.suffix) or mimetypes.guess_type(path.name)[0] or \
            "application/octet-stream"
        self._send(200, runfiles.read_inside(root, path), ctype, head)

    # --- methods ----------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._handle(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle(head=True)

    def _not_allowed(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        body = b'{"error":"only GET and HEAD are served","status":405}'
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    def _handle(self, head: bool) -> None:
        try:
            if self.server.loopback_only and not self._host_ok():
                self._error(HTTPStatus.FORBIDDEN, "this server answers only to localhost "
                            "names (Host header)", head)
                return
            self._route(head)
        except BadRequest as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e), head)
        except NotFound as e:
            self._error(HTTPStatus.NOT_FOUND, str(e) or "not found", head)
        except Busy as e:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(e), head)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client left, or did not read the reply in time
        except Exception as e:  # noqa: BLE001 - a bug: one line to the client, trace to stderr
            traceback.print_exc(file=sys.stderr)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                        f"internal error: {type(e).__name__}", head)

    def _host_ok(self) -> bool:
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if host.startswith("[") and "]" in host:
            name = host[: host.index("]") + 1]
        return is_loopback(name)

    # --- routing ----------------------------------------------------------------------------
    def _route(self, head: bool) -> None:
        split = urlsplit(self.path)
        raw_path, query = split.path, split.query
        if "\x00" in raw_path or len(raw_path) > 2000:
            raise NotFound("not found")
        parts = [unquote(p) for p in raw_path.split("/")[1:]]
        if parts and parts[-1] == "" and len(parts) > 1:
            parts = parts[:-1]
        first = parts[0] if parts else ""
        if len(parts) <= 1 and first in PAGES:
            check_page_query(first, query)
            self._file(STATIC_DIR, STATIC_DIR / PAGES[first], head)
        elif first == "static" and len(parts) == 2 and parts[1] in self.server.static:
            self._file(STATIC_DIR, STATIC_DIR / parts[1], head)
        elif first == "files":
            root = self.server.runs_root
            self._file(root, runfiles.resolve_file(root, parts[1:]), head)
        elif first == "api":
            self._json(200, self._api(parts[1:], query), head)
        else:
            raise NotFound("not found")

    def _api(self, parts: list[str], query: str) -> Any:
        root = self.server.runs_root
        if parts == ["runs"]:
            parse_query(query, NO_PARAMS)
            return {"root": str(root), "exists": root.is_dir(), "runs": runfiles.list_runs(root)}
        if len(parts) >= 3 and parts[0] == "runs" and parts[-1] in ("info", "metrics",
                                                                       "episodes"):
            run_parts, what = parts[1:-1], parts[-1]
            if what == "info":
                parse_query(query, NO_PARAMS)
                info = runfiles.run_info(root, run_parts)
                info["action_space"] = _action_space(info.get("env_id"))
                return info
            since = int(parse_query(query, SINCE_PARAMS)["since"])
            path = runfiles.resolve_run(root, run_parts) / f"{what}.csv"
            return runfiles.table_since(root, path, since)
        if parts == ["kepoch"]:
            from trustrl.demo import compute

            q = parse_query(query, KEPOCH_PARAMS)
            with self.server.computation():
                return compute.kepoch(int(q["K"]), int(q["N"]), float(q["eps"]),
                                      int(q["seed"]), int(q["iterations"]), float(q["lr"]))
        if parts == ["clip"]:
            from trustrl.demo import compute

            q = parse_query(query, CLIP_PARAMS)
            if q["adv"] == 0:
                raise BadRequest("adv must be non-zero (the four cases need its sign)")
            with self.server.computation():
                return compute.clip(float(q["adv"]), float(q["rho"]), float(q["eps"]))
        if parts == ["natural"]:
            from trustrl.demo import compute

            q = parse_query(query, NATURAL_PARAMS)
            with self.server.computation():
                return compute.natural(float(q["theta"]), float(q["delta"]), float(q["lr"]))
        raise NotFound("no such endpoint")


def check_page_query(page: str, query: str) -> None:
    """A page's own URL parameters (they preset its controls): validated like the API's."""
    if page == "dashboard":
        check_dashboard_query(query)
    else:
        parse_query(query, PAGE_PARAMS.get(page, NO_PARAMS))


def check_dashboard_query(query: str) -> None:
    """/dashboard?run=NAME&run=NAME2&poll=MS: run repeatable (a run name: 1-2 safe segments),
    poll the refresh period in milliseconds."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise BadRequest("malformed query string") from None
    polls = [v for k, v in pairs if k == "poll"]
    for key, value in pairs:
        if key == "run":
            segs = value.split("/")
            if not (1 <= len(segs) <= runfiles.MAX_DEPTH
                    and all(runfiles.SEGMENT.fullmatch(s) for s in segs)):
                raise BadRequest(f"run must be a run folder name under the runs root, got "
                                 f"{value[:40]!r}")
        elif key != "poll":
            raise BadRequest(f"unknown parameter {key[:40]!r} (accepted: run, poll)")
    if len(polls) > 1:
        raise BadRequest("parameter 'poll' given more than once")
    if polls:
        parse_query(f"poll={quote(polls[0])}", {"poll": POLL_PARAM})


def _action_space(env_id: Any) -> dict[str, Any]:
    if not isinstance(env_id, str) or not env_id:
        return {"kind": "unknown"}
    from trustrl.demo import compute

    return compute.action_space(env_id)


def make_server(host: str, port: int, runs_root: str | Path, log_requests: bool = False,
                **bounds: float) -> DemoServer:
    """Bind the server (port 0: a free port), or TrustrlError with one line when we cannot.
    bounds: request_timeout, max_connections, max_computations, compute_wait (DemoServer)."""
    try:
        return DemoServer(host, port, Path(runs_root), log_requests, **bounds)
    except OSError as e:
        import errno

        if e.errno == errno.EADDRINUSE:
            raise TrustrlError(f"port {port} on {host} is already in use; choose another with "
                               "--port (--port 0 picks a free one)") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise TrustrlError(f"not allowed to listen on {host}:{port} "
                               "(ports below 1024 need privileges)") from None
        if isinstance(e, socket.gaierror) or e.errno in (errno.EADDRNOTAVAIL,):
            raise TrustrlError(f"cannot listen on host {host!r}: {e.strerror or e}") from None
        raise TrustrlError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
