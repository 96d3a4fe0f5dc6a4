"""What the server tells its operators, and what it never tells them.

- Spans: every storage call becomes an OpenTelemetry span ``ownstate.<operation>``
  carrying ids (tenant, store, session, run, asset, fact), a count and an outcome (``ok``
  or the error's stable code). Arguments, results, payloads and error messages are never
  recorded. Only ``opentelemetry-api`` is used: with no SDK configured, spans cost next to
  nothing and go nowhere.
- Metrics: Prometheus counters and histograms in a registry of the app's own, served at
  ``GET /metrics`` (open unless a metrics token is set: expose it on an internal network).
- Access log: one INFO line per request on the ``ownstate.access`` logger, with method,
  path, status, duration, the caller's tenant, principal and key id, and a request id
  (the client's ``x-request-id`` when it sent a sane one, else a new one, echoed back).
  Never a body, a query string or the Authorization header.

It may touch the backend it wraps (every port call is traced: ``ownstate.backends``,
``backends.ports.vectors``), the error tree, the model, the package's version and
``ownstate._extras``, and FastAPI, prometheus_client and OpenTelemetry.
"""

from __future__ import annotations

import abc
import asyncio
import hmac
import inspect
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from .. import __version__
from .._extras import requires
from ..backends import Backend
from ..backends.ports.vectors import VectorPort
from ..errors import InvalidInput, OwnstateError, Unauthenticated
from ..model import CheckpointScope, Run

with requires("server", "the HTTP server"):
    from fastapi import FastAPI, Request, Response
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Histogram,
        generate_latest,
    )

__all__ = ["ACCESS_LOGGER", "RequestTelemetry", "Telemetry"]

ACCESS_LOGGER = "ownstate.access"
access_log = logging.getLogger(ACCESS_LOGGER)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Seconds; storage calls are often sub-millisecond, requests rarely above seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            10.0)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Port arguments that are ids, and the span attribute each becomes (``name`` is a store's).
_ID_ATTRIBUTES = {
    "tenant": "ownstate.tenant",
    "store": "ownstate.store",
    "name": "ownstate.store",
    "session_id": "ownstate.session_id",
    "run_id": "ownstate.run_id",
    "asset_id": "ownstate.asset_id",
    "fact_id": "ownstate.fact_id",
}
#: Port arguments that are batches: their length is the call's count when it returns none.
_BATCHES = ("items", "facts", "writes", "checkpoint_ids")
_LIFECYCLE = frozenset({"setup", "schema_status", "close"})


# spans around storage calls -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Operation:
    """Where one port method's ids and batch sit among its arguments, found once."""

    name: str
    span_name: str
    ids: tuple[tuple[int, str, str], ...]
    scope: tuple[int, str] | None
    batch: tuple[int, str] | None

    def attributes(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, str]:
        found: dict[str, str] = {}
        for position, parameter, attribute in self.ids:
            value = args[position] if position < len(args) else kwargs.get(parameter)
            if type(value) is str:
                found[attribute] = value
        if self.scope is not None:
            position, parameter = self.scope
            scope = args[position] if position < len(args) else kwargs.get(parameter)
            if isinstance(scope, CheckpointScope):
                found["ownstate.store"] = scope.store
                found["ownstate.session_id"] = scope.session_id
                found["ownstate.run_id"] = scope.run_id
        return found

    def count(self, result: object, args: tuple[Any, ...],
              kwargs: Mapping[str, Any]) -> int | None:
        if isinstance(result, list):
            return len(result)
        if isinstance(result, tuple) and result and isinstance(result[0], list):
            return len(result[0])  # a page and its cursor
        if self.batch is not None:
            position, parameter = self.batch
            batch = args[position] if position < len(args) else kwargs.get(parameter)
            if isinstance(batch, (list, tuple)):
                return len(batch)
        return None


def _operation(name: str) -> _Operation:
    parameters = list(inspect.signature(getattr(Backend, name)).parameters)[1:]
    ids = tuple((i, p, _ID_ATTRIBUTES[p]) for i, p in enumerate(parameters)
                if p in _ID_ATTRIBUTES)
    scope = next(((i, p) for i, p in enumerate(parameters) if p == "scope"), None)
    batch = next(((i, p) for i, p in enumerate(parameters) if p in _BATCHES), None)
    return _Operation(name, f"ownstate.{name}", ids, scope, batch)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, OwnstateError):
        return exc.code
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "internal_error"


class _TracedBackend(Backend):
    """A backend whose every port call is timed, counted and traced; the rest is the
    wrapped backend's. Made per backend class by :func:`_traced_class`, so that the class
    attributes callers consult (``capabilities``) are the wrapped one's."""

    def __init__(self, inner: Backend, telemetry: Telemetry) -> None:
        self._inner = inner
        self._telemetry = telemetry

    @property
    def inner(self) -> Backend:
        return self._inner

    @property
    def runs_inline(self) -> bool:
        return self._inner.runs_inline

    @property
    def bound_tenant(self) -> str | None:
        return self._inner.bound_tenant

    async def setup(self, *, migrate: bool) -> None:
        await self._inner.setup(migrate=migrate)

    async def schema_status(self) -> tuple[int, int]:
        return await self._inner.schema_status()

    async def close(self) -> None:
        await self._inner.close()

    async def isolation_bypass(self) -> str | None:
        return await self._inner.isolation_bypass()

    async def grant_app_role(self, role: str) -> bool:
        return await self._inner.grant_app_role(role)

    @property
    def decision_signal(self) -> Any:
        return self._inner.decision_signal

    async def wait_for_decision(self, tenant: str, run_id: str | None,
                                framework: str | None, stores: frozenset[str] | None,
                                timeout: float) -> Run | None:
        # A wait is no storage operation, and the wrapped backend's signal and listener
        # are what a decision through it wakes.
        return await self._inner.wait_for_decision(tenant, run_id, framework, stores,
                                                   timeout)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _port_method(operation: _Operation) -> Callable[..., Awaitable[Any]]:
    name = operation.name

    async def call(self: _TracedBackend, *args: Any, **kwargs: Any) -> Any:
        return await self._telemetry.run(operation, getattr(self._inner, name), args, kwargs)

    call.__name__ = name
    call.__qualname__ = f"_TracedBackend.{name}"
    call.__doc__ = getattr(Backend, name).__doc__
    return call


#: The optional vectors port's methods have refusing defaults, so they are not abstract;
#: forwarded all the same, or a server would refuse every vector a backend stores.
_OPTIONAL = frozenset(n for n, f in vars(VectorPort).items()
                      if not n.startswith("_") and inspect.iscoroutinefunction(f))
for _name in sorted((Backend.__abstractmethods__ - _LIFECYCLE) | _OPTIONAL):
    setattr(_TracedBackend, _name, _port_method(_operation(_name)))
# The class is abstract to the type checker only: every port method was just set on it.
abc.update_abstractmethods(cast(Any, _TracedBackend))


@cache
def _traced_class(kind: type[Backend]) -> type[_TracedBackend]:
    made = type(f"Traced{kind.__name__}", (_TracedBackend,),
                {"capabilities": kind.capabilities, "__module__": __name__})
    return cast(type[_TracedBackend], made)


# the instruments ---------------------------------------------------------------------


class Telemetry:
    """One app's instruments: a tracer (``tracer_provider``'s, else the global one, looked
    up at each span so that one configured later is used) and Prometheus metrics in a
    registry of its own, so that several apps in one process never share counts."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("ownstate", __version__,
                                       tracer_provider=tracer_provider)
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ownstate_http_requests", "HTTP requests answered, by route template.",
            ["method", "route", "status"], registry=self.registry)
        self.request_seconds = Histogram(
            "ownstate_http_request_duration_seconds", "Time to answer an HTTP request.",
            ["method", "route"], buckets=_BUCKETS, registry=self.registry)
        self.operation_seconds = Histogram(
            "ownstate_storage_operation_duration_seconds",
            "Time a storage operation took, by outcome (ok or the error code).",
            ["operation", "outcome"], buckets=_BUCKETS, registry=self.registry)

    def traced(self, backend: Backend) -> Backend:
        """``backend`` with every port call traced and measured."""
        return _traced_class(type(backend))(backend, self)

    async def run(self, operation: _Operation, method: Callable[..., Awaitable[Any]],
                  args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Await ``method(*args, **kwargs)`` inside its span; re-raises what it raises."""
        started = time.perf_counter()
        span = self.tracer.start_span(operation.span_name, kind=SpanKind.INTERNAL)
        if not span.is_recording():
            # Nothing records the span (no SDK, or sampled out): skip making it current,
            # which costs ten times what the rest of this does.
            try:
                result = await method(*args, **kwargs)
            except BaseException as exc:
                self._timed(operation, _outcome(exc), started)
                raise
            self._timed(operation, "ok", started)
            return result
        # The exception is never recorded: its message may quote what the caller sent.
        with trace.use_span(span, end_on_exit=True, record_exception=False,
                            set_status_on_exception=False):
            span.set_attributes(operation.attributes(args, kwargs))
            try:
                result = await method(*args, **kwargs)
            except BaseException as exc:
                outcome = _outcome(exc)
                span.set_attribute("ownstate.outcome", outcome)
                span.set_attribute("error.type", outcome if isinstance(
                    exc, OwnstateError) else f"{type(exc).__module__}.{type(exc).__name__}")
                span.set_status(Status(StatusCode.ERROR, outcome))
                self._timed(operation, outcome, started)
                raise
            count = operation.count(result, args, kwargs)
            if count is not None:
                span.set_attribute("ownstate.count", count)
            span.set_attribute("ownstate.outcome", "ok")
        self._timed(operation, "ok", started)
        return result

    def _timed(self, operation: _Operation, outcome: str, started: float) -> None:
        self.operation_seconds.labels(operation.name, outcome).observe(
            time.perf_counter() - started)

    def install(self, app: FastAPI, *, metrics_token: str | None = None) -> None:
        """Add the access log and request metrics to ``app`` (outermost, so that refusals
        made before routing are counted too) and serve ``GET /metrics``, open or behind
        ``metrics_token``. Raises :class:`~ownstate.errors.InvalidInput` for an empty or
        non-text token."""
        if metrics_token is not None and (not isinstance(metrics_token, str)
                                          or not metrics_token.strip()):
            raise InvalidInput("metrics_token must be non-empty text", field="metrics_token")
        expected = metrics_token.strip().encode() if metrics_token is not None else None
        registry = self.registry

        async def metrics(request: Request) -> Response:
            """Prometheus metrics, in the text exposition format."""
            if expected is not None:
                scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(
                        given.strip().encode(), expected):
                    raise Unauthenticated("send the metrics token as 'Authorization: Bearer "
                                          "...'")
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
        app.add_middleware(RequestTelemetry, telemetry=self)
        app.state.telemetry = self

    def record_request(self, scope: Scope, status: int, seconds: float,
                       request_id: str) -> None:
        method = scope.get("method", "")
        method = method if method in _METHODS else "OTHER"
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        self.requests.labels(method, route, str(status)).inc()
        self.request_seconds.labels(method, route).observe(seconds)
        if not access_log.isEnabledFor(logging.INFO):
            return
        state = scope.get("state")
        caller = state.get("caller") if isinstance(state, dict) else None
        tenant, principal, key_id = (
            (caller.tenant, caller.principal, caller.key.key_id) if caller is not None
            else ("-", "-", "-"))
        raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "replace")
        # Some servers keep the query in raw_path; the query never reaches the log.
        path = raw.split(b"?", 1)[0][:1024].decode("ascii", "backslashreplace")
        millis = round(seconds * 1000, 1)
        access_log.info(
            "%s %s %s %.1fms tenant=%s principal=%s key_id=%s request_id=%s",
            method, path, status, millis, tenant, principal, key_id, request_id,
            extra={"http_method": method, "http_route": route, "http_path": path,
                   "http_status": status, "duration_ms": millis, "tenant": tenant,
                   "principal": principal, "key_id": key_id, "request_id": request_id})


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given: str = value.decode("latin-1")
            if _REQUEST_ID_RE.fullmatch(given):
                return given
            break
    return uuid.uuid4().hex


class RequestTelemetry:
    """ASGI middleware: a request id, request metrics and one access-log line per request."""

    def __init__(self, app: Any, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope)
        echoed = (b"x-request-id", request_id.encode("ascii"))
        status = 500  # what the server answers when the app raises before responding

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message = {**message, "headers": [*message.get("headers", ()), echoed]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.telemetry.record_request(scope, status, time.perf_counter() - started,
                                          request_id)
