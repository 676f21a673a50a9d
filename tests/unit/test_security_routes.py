"""docs/security.md's list of the routes that reach an engine is the engines' route tables
(issue 42 item 5: it had drifted; the gateway and the relay forward exactly these)."""

from __future__ import annotations

import re
from pathlib import Path

from planner.adjuster.backends.relay import ROUTES
from planner.adjuster.gateway.proxy import PROXIED
from planner.engines.base import api_routes

ROOT = Path(__file__).resolve().parents[2]


def test_security_md_lists_the_routes_the_engines_serve_and_nothing_else():
    text = (ROOT / "docs" / "security.md").read_text()
    table = re.search(r"<!-- routes: .*?-->(.*?)<!-- /routes -->", text, re.S).group(1)
    listed = dict(re.findall(r"\| `POST (/\S+)` \| (\w+) \|", table))
    assert listed == api_routes()
    assert set(PROXIED) == set(listed)  # what the gateway forwards
    assert {p for m, p in ROUTES if m == "POST" and p.startswith("/v1/")} == set(listed)
