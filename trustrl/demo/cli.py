"""`trustrl demo`: serve the interactive demos and the run dashboard on a local web server.

Standard library only at module level (this module is imported to build `trustrl --help`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_PORT = 8765


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo", help="the chapter's interactive demos and a live run dashboard in the browser",
        description="Start a local web server with the clip explorer, the K-epoch bandit demo, "
        "natural vs plain gradient on the one-parameter policy, and a dashboard of the runs "
        "under --runs that updates while they train. Works offline; nothing is written and no "
        "training is started by the server. Ctrl-C stops it.")
    p.add_argument("--port", default=str(DEFAULT_PORT),
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--runs", default="runs", help="folder of run folders for the dashboard "
                   "(default runs/)")
    p.add_argument("--open", action="store_true", help="open the start page in a browser")
    p.add_argument("--log-requests", action="store_true", help="print one line per request")
    p.set_defaults(func=cmd_demo)


def parse_port(raw: str) -> int:
    from trustrl.util.errors import TrustrlError

    s = str(raw).strip()
    if not s.isdigit() or not 0 <= int(s) <= 65535:
        raise TrustrlError(f"--port must be an integer from 0 to 65535, got {raw!r}")
    return int(s)


def check_host(raw: str) -> str:
    from trustrl.util.errors import TrustrlError

    host = str(raw).strip()
    if not host or any(c.isspace() or c in "/?#@" for c in host) or len(host) > 255:
        raise TrustrlError(f"--host must be a host name or IP address, got {raw!r}")
    return host


def cmd_demo(args: argparse.Namespace) -> int:
    from trustrl.demo.server import is_loopback, make_server
    from trustrl.util.errors import TrustrlError

    port = parse_port(args.port)
    host = check_host(args.host)
    runs = Path(args.runs)
    if runs.exists() and not runs.is_dir():
        raise TrustrlError(f"--runs {args.runs} is not a folder")
    server = make_server(host, port, runs, log_requests=args.log_requests)
    try:  # from here on Ctrl-C or SIGTERM (even while the lines below print) stops it cleanly
        url = server.url
        print(f"trustrl demo: serving on {url}  (Ctrl-C to stop)")
        print(f"  clip explorer     {url}clip")
        print(f"  K-epoch demo      {url}kepoch")
        print(f"  natural gradient  {url}natural")
        print(f"  run dashboard     {url}dashboard   (runs from {server.runs_root}"
              + ("" if runs.is_dir() else "; the folder does not exist yet") + ")")
        if not is_loopback(host):
            print(f"  note: listening on {host}, so other machines that can reach it can read "
                  "these pages and the runs", file=sys.stderr)
        sys.stdout.flush()
        if args.open:
            import webbrowser

            webbrowser.open(url)
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("trustrl demo: stopped")
    finally:
        server.server_close()
    return 0
