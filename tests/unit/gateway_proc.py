"""A gateway in its own process over fake engines (gateway_fakes.py), for tests that need a
real process: signals (SIGHUP), or a network namespace with a non-loopback address.

    python gateway_proc.py serve --state DIR --host H --port P [--keys F] [--insecure]
        [--watch-s S] [--models a,b]
    python gateway_proc.py client URL REQUESTS_JSON   # prints one JSON answer per request

`serve` runs the real `run_forever` (SIGTERM drains, SIGHUP re-reads the keys); each model
gets one awake fake engine. `client` waits for URL/health, then sends [method, path,
headers] requests in order and prints [[status, body, retry_after], ...].
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable


def serve(args: argparse.Namespace) -> None:
    from gateway_fakes import FakeControl, inst

    from planner.adjuster.gateway import Gateway, GatewayConfig, run_forever
    from planner.adjuster.gateway.auth import Auth
    from planner.schemas.plan import Point

    names = args.models.split(",")
    point = Point(name="p", instances=[inst(f"{m}0", m, [i]) for i, m in enumerate(names)])
    ctl = FakeControl(point, {i.id for i in point.instances})
    auth = Auth.open(
        args.state, args.keys, insecure=args.insecure, model_names=names, watch_s=args.watch_s
    )
    gw = Gateway(point, ctl, state_dir=args.state, config=GatewayConfig(), auth=auth)
    try:
        run_forever(gw, args.host, args.port)
    finally:
        ctl.close()


def wait_health(url: str, up: Callable[[], bool] = lambda: True, timeout_s: float = 60.0) -> bool:
    """Poll URL/health until it answers 200 (True), or `up()` says the server is gone or
    `timeout_s` passes (False)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if not up() or time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def client(url: str, requests: list) -> None:
    import httpx

    if not wait_health(url):
        sys.exit(f"{url}/health did not answer")
    out = []
    for method, path, headers in requests:
        r = httpx.request(method, url + path, headers=headers, timeout=30)
        try:
            body = r.json()
        except ValueError:
            body = r.text
        out.append([r.status_code, body, r.headers.get("Retry-After")])
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "client":
        client(sys.argv[2], json.loads(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--state", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--watch-s", type=float, default=1.0)
    ap.add_argument("--models", default="a,b")
    serve(ap.parse_args())


if __name__ == "__main__":
    main()
