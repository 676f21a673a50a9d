"""The gateway's own routes: GET /v1/models, /health, /metrics, and the JSON 404/405 of
every other path or method. Who may read which: auth.py (/metrics and the detailed /health
need an admin key or a loopback peer)."""

from __future__ import annotations

from collections.abc import Callable

from planner.adjuster.gateway.answers import error
from planner.adjuster.gateway.auth import Auth
from planner.adjuster.gateway.h1server import Request
from planner.adjuster.gateway.metrics import Metrics
from planner.adjuster.gateway.pool import Pool
from planner.adjuster.gateway.proxy import PROXIED
from planner.adjuster.gateway.reply import Response, json_response

GETS = ("/v1/models", "/health", "/metrics")


class Routes:
    """Handlers of the GET routes and of what no route takes."""

    def __init__(
        self,
        pool: Pool,
        auth: Auth,
        metrics: Metrics,
        totals: Callable[[], dict[str, tuple[str, float]]],
        settle: Callable[[], None],
    ):
        self.pool = pool
        self.auth = auth
        self.metrics = metrics
        self.totals = totals
        self.settle = settle  # counts the requests that ended since (record.py)

    async def h_models(self, request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "planner"}
            for m in sorted(self.pool.by_model)
            if self.auth.allows(request, m)
        ]
        return json_response({"object": "list", "data": data})

    async def h_health(self, request: Request) -> Response:
        if not self.auth.details(request):  # liveness only, to anyone
            return json_response({"status": "ok", "auth": self.auth.mode})
        inst = {
            i.spec.id: {"model": i.spec.model, "status": i.status, "outstanding": i.outstanding}
            for i in self.pool.instances.values()
        }
        return json_response(
            {
                "status": "ok",
                "auth": self.auth.mode,
                "point": self.pool.point.name,
                "instances": inst,
            }
        )

    async def h_metrics(self, request: Request) -> Response:
        self.settle()
        text = self.metrics.render(self.gauges, self.totals()) + self.auth.render_metrics()
        return Response(text.encode(), content_type="text/plain; charset=utf-8")

    async def h_other(self, request: Request) -> Response:
        """404 for unknown paths, 405 for a known path with another method (JSON bodies)."""
        path = request.path
        if path in PROXIED or path in GETS:
            allow = "POST" if path in PROXIED else "GET"
            return error(
                405,
                f"{request.method} is not allowed on {path}; use {allow}",
                "MethodNotAllowedError",
                headers={"Allow": allow},
            )
        paths = sorted((*PROXIED, *GETS))
        return error(404, f"no route {path}; routes: {paths}", "NotFoundError")

    def gauges(self) -> dict[str, tuple[str, dict[str, float]]]:
        pool = self.pool
        models = sorted(pool.by_model)
        return {
            "planner_gateway_awake_instances": (
                "Awake instances by model.",
                {m: sum(i.status == "awake" for i in pool.by_model[m]) for m in models},
            ),
            "planner_gateway_outstanding_requests": (
                "Requests being served by model.",
                {m: sum(i.outstanding for i in pool.by_model[m]) for m in models},
            ),
            "planner_gateway_queued_requests": (
                "Requests waiting for a wake or a slot by model.",
                {m: pool.waiting[m] for m in models},
            ),
        }
