"""The ``ownstate`` command: a thin shell over the public sync API.

Every command opens a client with :func:`ownstate.connect` and calls its public methods;
nothing here reads or writes the datastore any other way. Errors from ownstate become a
one-line message on stderr and exit status 1.

It may touch the public sync API (``ownstate``), the other command modules (``archive.cli``,
``distill.cli``, ``importers.cli``, ``mcp.cli``, ``cli_common``), URL parsing
(``ownstate.backends.resolve_url``), and for ``ownstate serve`` the server and uvicorn;
click throughout.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import shlex
import shutil
import sys
import textwrap
from collections.abc import Iterator, Sequence
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

import ownstate
from ownstate._extras import requires
from ownstate.archive.cli import copy_command, export_command
from ownstate.backends import resolve_url
from ownstate.cli_common import Duration, find_session, load_embedder
from ownstate.distill.cli import distill_command
from ownstate.importers.cli import import_command
from ownstate.mcp.cli import mcp_command
from ownstate.model import RetentionPolicy

__all__ = ["cli", "main"]

#: the store ``ownstate demo`` writes to, created when missing
DEMO_STORE = "demo"
#: how many characters of an item of unknown shape a transcript shows
UNKNOWN_ITEM_CHARS = 160
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text"})


_URL_HELP = ("Where state lives: sqlite:///path.db (default sqlite:///ownstate.db), "
             "memory://, postgresql://..., redis://... or http(s)://... (a server).")
_TENANT_HELP = ("The tenant whose state to read and write (default: \"default\"; on an "
                "http:// URL, the API key's).")


def _override(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A ``--url`` or ``--tenant`` given after a subcommand replaces the one before it."""
    if value is not None:
        options = ctx.find_object(_Options)
        if options is not None:  # None only while click renders --help
            setattr(options, str(param.name), value)
            if param.name == "url":
                options.url_given = True


def _shared_options() -> list[click.Parameter]:
    """``--url`` and ``--tenant`` as every subcommand accepts them (the environment is read
    once, by the top-level ``--url``, so it never overrides a value given before)."""
    return [click.Option(["--url"], default=None, expose_value=False, callback=_override,
                         help=_URL_HELP),
            click.Option(["--tenant"], default=None, expose_value=False, callback=_override,
                         help=_TENANT_HELP)]


class _Group(click.Group):
    """A command group that turns any ownstate error into one line on stderr, exit 1, and
    gives every command it holds the ``--url`` and ``--tenant`` options, so they may come
    before or after the command's name."""

    group_class = type  # subgroups are _Groups too

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        taken = {opt for param in cmd.params for opt in param.opts}
        cmd.params.extend(p for p in _shared_options() if not taken & set(p.opts))
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ownstate.OwnstateError as exc:
            raise click.ClickException(" ".join(exc.message.split())) from exc


class _Options:
    """The global options, handed to every command through the click context."""

    def __init__(self, url: str | None, tenant: str | None, *, program: str,
                 url_given: bool) -> None:
        self.url = url
        self.tenant = tenant
        self.program = program
        #: whether the URL was given on the command line (not read from the environment)
        self.url_given = url_given

    def connect(self, *, migrate: bool = True, tenant: str | None = None) -> ownstate.Client:
        return ownstate.connect(self.url, tenant=tenant or self.tenant, migrate=migrate)

    @property
    def command_prefix(self) -> str:
        """How to repeat a command against the same database, for hints."""
        prefix = [self.program]
        if self.url is not None and self.url_given:
            prefix.append(f"--url {shlex.quote(self.url)}")
        if self.tenant is not None:
            prefix.append(f"--tenant {shlex.quote(self.tenant)}")
        return " ".join(prefix)

    @property
    def shown_url(self) -> str:
        """The URL in use, for messages (the argument, else ``OWNSTATE_URL``, else default)."""
        return resolve_url(self.url)

    def required_tenant(self) -> str:
        """The tenant given with ``--tenant``, for commands that must not assume one."""
        if self.tenant is None:
            raise click.UsageError("give the tenant with --tenant")
        return self.tenant


pass_options = click.make_pass_decorator(_Options)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="OWNSTATE_URL", show_envvar=True, default=None, help=_URL_HELP)
@click.option("--tenant", default=None, help=_TENANT_HELP)
@click.version_option(ownstate.__version__, prog_name="ownstate")
@click.pass_context
def cli(ctx: click.Context, url: str | None, tenant: str | None) -> None:
    """ownstate: the system of record for AI-agent state.

    --url and --tenant may also follow any command's name; given in both places, the later
    one wins.
    """
    invoked = Path(sys.argv[0]) if sys.argv else Path()
    program = shlex.quote(str(invoked)) if invoked.name == "ownstate" else "ownstate"
    given = url is not None and ctx.get_parameter_source("url") is ParameterSource.COMMANDLINE
    ctx.obj = _Options(url, tenant, program=program, url_given=given)


# schema --------------------------------------------------------------------------------


class _Echo(logging.Handler):
    """Log records as lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


@contextlib.contextmanager
def _migration_log() -> Iterator[None]:
    """Print what migrations log (``ownstate.migrate``, INFO) while migrating."""
    log = logging.getLogger("ownstate.migrate")
    handler, level = _Echo(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


@cli.command()
@click.option("--app-role", metavar="NAME",
              help="PostgreSQL: then create (NOLOGIN) or grant the role the application "
                   "connects as, which row-level security binds (see docs/postgres.md).")
@pass_options
def migrate(options: _Options, app_role: str | None) -> None:
    """Bring the schema to the version this ownstate expects, saying on stderr what each
    step does (and, for a step that goes over existing rows, how far it is)."""
    try:
        with options.connect(migrate=False) as client:
            found, expected = client.migrate()
    except ownstate.SchemaVersion as exc:
        if not isinstance(exc.found, int) or not isinstance(exc.expected, int):
            raise
        if exc.found > exc.expected:
            raise  # a newer schema needs newer code, not a migration
        with _migration_log(), options.connect(migrate=True) as client:
            _, expected = client.migrate()
        click.echo(f"migrated {options.shown_url} from schema version {exc.found} "
                   f"to {expected}")
    else:
        click.echo(f"schema is already at version {found}; nothing to do")
    if app_role is not None:
        with options.connect(migrate=False) as client:
            created = client.grant_app_role(app_role)
        if created:
            click.echo(f"created role {app_role!r} (NOLOGIN: grant it to the role the "
                       "application logs in as, or ALTER ROLE ... LOGIN PASSWORD)")
        click.echo(f"role {app_role!r} may read and write ownstate's rows, under "
                   "row-level security")


@cli.command()
@pass_options
def check(options: _Options) -> None:
    """Verify the schema and tenant isolation, changing nothing.

    For processes that may not run DDL. Exits 0 when the schema is current and the
    database enforces tenant isolation for this connection (on PostgreSQL: row-level
    security binds its role), and 1, with the reason on stderr, when not.
    """
    try:
        with options.connect(migrate=False) as client:
            found, _ = client.check()
            bypass = client.isolation_bypass()
    except ownstate.SchemaVersion as exc:
        click.echo(" ".join(exc.message.split()), err=True)
        raise SystemExit(1) from exc
    click.echo(f"schema is at version {found}")
    if bypass is not None:
        click.echo(bypass, err=True)
        raise SystemExit(1)


# sessions ------------------------------------------------------------------------------


@cli.group()
def sessions() -> None:
    """List sessions and read their transcripts."""


@sessions.command("list")
@click.option("--store", help="Only this session store (default: every store).")
@click.option("--actor", "actor_id", help="Only sessions of this actor id.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="At most this many sessions, newest first.")
@pass_options
def list_sessions(options: _Options, store: str | None, actor_id: str | None,
                  limit: int) -> None:
    """Sessions, newest first, across every store or in one."""
    with options.connect(migrate=False) as client:
        stores = ([client.session_stores.get(store)] if store is not None
                  else list(client.session_stores.list()))
        page_size = min(limit + 1, client.limits.max_page_size)
        listings = [s.list_sessions(actor_id=actor_id, page_size=page_size) for s in stores]
        newest_first = heapq.merge(*listings, key=lambda s: s.create_time, reverse=True)
        found = list(islice(newest_first, limit + 1))
    if not found:
        click.echo("no sessions", err=True)
        return
    rows = [
        [s.store, s.session_id, s.actor_id, s.parent_session_id or "-",
         _when(s.create_time), _when(s.last_activity_time)]
        for s in found[:limit]
    ]
    click.echo(_table(["STORE", "SESSION", "ACTOR", "PARENT", "CREATED (UTC)",
                       "LAST ACTIVITY (UTC)"], rows))
    if len(found) > limit:
        click.echo(f"(first {limit} shown; raise --limit for more)", err=True)


@sessions.command("show")
@click.argument("session_id")
@click.option("--store", help="The session store (default: search every store).")
@pass_options
def show_session(options: _Options, session_id: str, store: str | None) -> None:
    """The transcript of SESSION_ID, in replay order."""
    with options.connect(migrate=False) as client:
        session = find_session(client, session_id, store)
        click.echo(render_transcript(session))


# memory --------------------------------------------------------------------------------


@cli.group()
def memory() -> None:
    """Durable facts about subjects, with their provenance."""


@memory.command("show")
@click.argument("subject")
@click.option("--store", help="Only this memory store (default: every memory store).")
@click.option("--history", "with_history", is_flag=True,
              help="Also list every earlier value of each key.")
@pass_options
def show_memory(options: _Options, subject: str, store: str | None,
                with_history: bool) -> None:
    """The current facts about SUBJECT (e.g. user:8814), with where each came from."""
    with options.connect(migrate=False) as client:
        stores = ([client.memory_stores.get(store)] if store is not None
                  else list(client.memory_stores.list()))
        rows: list[list[str]] = []
        for mem in stores:
            for fact in mem.recall(subject):
                facts = mem.history(subject, fact.key) if with_history else [fact]
                rows.extend(_fact_row(mem.name, f) for f in facts)
    if not rows:
        click.echo(f"no facts about {subject!r}", err=True)
        return
    headers = ["STORE", "KEY", "VALUE", "CONFIDENCE", "SOURCE", "VALID FROM (UTC)",
               "RECORDED (UTC)"]
    if with_history:
        headers.append("CLOSED")
    click.echo(_table(headers, [row if with_history else row[:-1] for row in rows]))


def _fact_row(store: str, fact: ownstate.Fact) -> list[str]:
    source = fact.source_type
    if fact.source_item_id is not None:
        where = "/".join(p for p in (fact.source_store, fact.source_session_id) if p)
        source += f" {where}#{fact.source_item_id}"
    value = _compact(fact.value)
    return [store, fact.key, value if len(value) <= 60 else value[:59] + "…",
            "-" if fact.confidence is None else f"{fact.confidence:g}", source,
            _when(fact.valid_from), _when(fact.recorded_at),
            fact.closed_reason or ("current" if fact.superseded_at is None else "closed")]


# runs ----------------------------------------------------------------------------------


@cli.group()
def runs() -> None:
    """Framework runs: what is in flight and what waits on a human."""


@runs.command("outstanding")
@click.option("--status", type=click.Choice(["awaiting_human", "running"]),
              default="awaiting_human", show_default=True, help="Which runs to show.")
@click.option("--framework", help="Only runs of this framework (e.g. langgraph).")
@click.option("--older-than", type=Duration(),
              help="Only runs in that status for longer than this (e.g. 30m, 2h, 1d).")
@click.option("--limit", type=click.IntRange(min=1, max=1000), default=100,
              show_default=True, help="At most this many runs, longest waiting first.")
@pass_options
def outstanding_runs(options: _Options, status: str, framework: str | None,
                     older_than: float | None, limit: int) -> None:
    """Runs across the tenant in STATUS, the longest waiting first."""
    with options.connect(migrate=False) as client:
        found = client.runs.outstanding(status, framework=framework, older_than=older_than,
                                        limit=limit)
    if not found:
        click.echo(f"no runs {status.replace('_', ' ')}", err=True)
        return
    rows = []
    for run in found:
        awaiting = run.awaiting or {}
        what = " ".join(str(awaiting[k]) for k in ("kind", "tool") if k in awaiting) or "-"
        since = awaiting.get("requested_at") or run.started_at.isoformat()
        rows.append([run.run_id, f"{run.store}/{run.session_id}", run.framework,
                     run.thread_key or "-", what, str(awaiting.get("requested_by", "-")),
                     str(since)[:19].replace("T", " "), run.lease_owner or "-"])
    click.echo(_table(["RUN", "SESSION", "FRAMEWORK", "THREAD", "AWAITING", "REQUESTED BY",
                       "SINCE (UTC)", "LEASE"], rows))


@runs.command("list")
@click.option("--status", type=click.Choice(["running", "awaiting_human", "done", "failed",
                                            "cancelled"]), help="Only runs in this status.")
@click.option("--framework", help="Only runs of this framework (e.g. ownstate.distill).")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="Show at most this many runs.")
@pass_options
def list_runs(options: _Options, status: str | None, framework: str | None,
              limit: int) -> None:
    """The tenant's runs, newest first (failed distillations: --status failed --framework
    ownstate.distill)."""
    with options.connect(migrate=False) as client:
        found = list(islice(client.runs.list(status=status, framework=framework), limit))
    if not found:
        click.echo("no runs", err=True)
        return
    rows = [[run.run_id, f"{run.store}/{run.session_id}", run.framework, run.thread_key or "-",
             run.status, _when(run.started_at),
             _when(run.ended_at) if run.ended_at is not None else "-"] for run in found]
    click.echo(_table(["RUN", "SESSION", "FRAMEWORK", "THREAD", "STATUS", "STARTED (UTC)",
                       "ENDED (UTC)"], rows))


# checkpoints ---------------------------------------------------------------------------


@cli.command()
@click.option("--keep-last", type=click.IntRange(min=1),
              help="Keep only the newest N checkpoints per run and namespace.")
@click.option("--max-age", type=Duration(), help="Drop checkpoints older than this (e.g. 7d).")
@click.option("--drop-ended", is_flag=True,
              help="Drop every checkpoint of runs that are done, failed or cancelled.")
@pass_options
def gc(options: _Options, keep_last: int | None, max_age: float | None,
       drop_ended: bool) -> None:
    """Apply checkpoint retention across the tenant.

    Checkpoints are disposable: sessions, memory and runs are never touched. Give at least
    one policy.
    """
    if keep_last is None and max_age is None and not drop_ended:
        raise click.UsageError("give at least one of --keep-last, --max-age, --drop-ended")
    policy = RetentionPolicy(keep_last=keep_last, max_age_seconds=max_age,
                             drop_when_run_ends=drop_ended)
    with options.connect(migrate=False) as client:
        report = client.checkpoints.apply_retention(policy)
    click.echo(f"deleted {report.checkpoints_deleted} checkpoints, "
               f"freed {report.bytes_freed} bytes")


# demo ----------------------------------------------------------------------------------


_CONVERSATION: list[dict[str, Any]] = [
    {"type": "message", "role": "user",
     "content": "Is it warm enough for the beach in Lisbon today?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": '{"city": "Lisbon"}'},
    {"type": "function_call_output", "call_id": "call_1",
     "output": '{"temp_c": 24, "sky": "sunny", "wind_kmh": 12}'},
    {"type": "message", "role": "assistant", "model": "gpt-4.1-mini",
     "usage": {"input_tokens": 412, "output_tokens": 23},
     "content": [{"type": "output_text",
                  "text": "Yes: 24 °C, sunny and a light breeze. Take sunscreen."}]},
]

_FORK_CONTINUATION: list[dict[str, Any]] = [
    {"type": "message", "role": "assistant", "model": "gpt-4.1",
     "usage": {"input_tokens": 412, "output_tokens": 31},
     "content": [{"type": "output_text",
                  "text": "Warm, yes (24 °C and sunny), but the Atlantic is about 17 °C, "
                          "so bring a wetsuit if you plan to swim."}]},
    {"type": "message", "role": "user", "content": "Good point. Thanks!"},
]


@cli.command()
@pass_options
def demo(options: _Options) -> None:
    """Store, fork and replay a short conversation.

    Stores a user question, a tool call, its output and an answer in the store "demo"
    (created if missing), forks the session before the answer, continues the fork
    differently, and prints both transcripts as read back from the database. Safe to run
    again: each run makes two new sessions.
    """
    with options.connect() as client:
        try:
            store = client.session_stores.create(DEMO_STORE)
        except ownstate.AlreadyExists:
            store = client.session_stores.get(DEMO_STORE)
        session = store.add(actor_id="demo-user", metadata={"source": "ownstate-demo"})
        stored = session.append_items(_CONVERSATION)
        before_answer = stored[-2]  # the tool output, just before the assistant's answer
        fork = session.fork(up_to_item_id=before_answer.item_id)
        fork.append_items(_FORK_CONTINUATION)

        click.echo(f"Stored a conversation in {options.shown_url} (store {store.name!r}),")
        click.echo(f"forked it after item {before_answer.seq} and gave the fork another "
                   "ending. Replayed from the database:\n")
        click.echo(render_transcript(session))
        click.echo()
        click.echo(render_transcript(fork))
        click.echo()
        click.echo("Look again with:")
        click.echo(f"  {options.command_prefix} sessions list --store {store.name}")
        click.echo(f"  {options.command_prefix} sessions show {fork.session_id}")


# the HTTP server and its keys ------------------------------------------------------------


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (0.0.0.0 for every interface).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080,
              show_default=True, help="Port to listen on.")
@click.option("--no-migrate", is_flag=True,
              help="Only verify the schema at start; never change it (for replicas).")
@click.option("--bootstrap/--no-bootstrap", default=True, show_default=True,
              help="When the tenant has no API key yet, make an admin key and print it once.")
@click.option("--key-cache", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Seconds a checked key is remembered; a key revoked elsewhere is refused "
                   "within this time.")
@click.option("--metrics-token", envvar="OWNSTATE_METRICS_TOKEN", show_envvar=True,
              default=None, help="Require this bearer token at /metrics (default: open; "
                                 "expose /metrics only on an internal network).")
@click.option("--allow-rls-bypass", is_flag=True,
              help="Serve on a non-loopback address even though row-level security does "
                   "not bind the database role (a superuser, BYPASSRLS, the tables' owner).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True,
              help="Access log lines (logger ownstate.access) are at info.")
@click.option("--max-header-bytes", type=click.IntRange(min=1024), default=256 * 1024,
              show_default=True, help="The largest request head (request line and headers); "
                                      "a larger one gets 400 and the connection is closed.")
@click.option("--max-headers", type=click.IntRange(min=1), default=100, show_default=True,
              help="The most header fields a request may carry (431 beyond).")
@click.option("--embedder", envvar="OWNSTATE_EMBEDDER", show_envvar=True, default=None,
              help="Embed writes and queries for semantic and hybrid search: minilm (the "
                   "bundled model, extra embed) or module:attribute (an Embedder, or a "
                   "callable making one). Default: none, every search lexical.")
@click.option("--request-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Seconds a client has to send a whole request, head "
                                      "and body (and a new connection to begin one); a "
                                      "client that misses it is disconnected.")
@click.option("--keep-alive-timeout", type=click.IntRange(min=1), default=5,
              show_default=True, help="Seconds an idle connection is kept between requests.")
@pass_options
def serve(options: _Options, host: str, port: int, no_migrate: bool,
          bootstrap: bool, key_cache: float, metrics_token: str | None,
          allow_rls_bypass: bool, log_level: str, max_header_bytes: int, max_headers: int,
          request_timeout: float, keep_alive_timeout: int, embedder: str | None) -> None:
    """Serve the HTTP API (docs at /docs, schema at /openapi.json, metrics at /metrics).

    Every request needs an API key (``ownstate keys create``). Several replicas may serve
    one PostgreSQL database; start extra replicas with --no-migrate. When row-level security
    does not bind the database role, it warns, and serves on a loopback address only,
    unless given --allow-rls-bypass.
    """
    with requires("server", "the HTTP server"):
        import uvicorn

    from ownstate.server import create_app
    from ownstate.server.serving import HttpBounds, uvicorn_config
    url = options.url
    shown = resolve_url(url)
    with ownstate.connect(url, tenant=options.tenant, migrate=not no_migrate) as client:
        _refuse_unisolated(client, host, allowed=allow_rls_bypass)
        if bootstrap and not client.api_keys.list():
            key, token = client.api_keys.create("admin", admin=True)
            click.echo(f"Made the first API key of tenant {client.tenant!r}: an admin key "
                       f"({key.key_id}). It is shown only now:\n\n  {token}\n")
            click.echo("Send it as 'Authorization: Bearer <key>', or "
                       "ownstate.connect(url, token=<key>).\n")
    click.echo(f"Serving {shown} on http://{host}:{port} (Ctrl-C stops).")
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(url, migrate=not no_migrate, key_cache_seconds=key_cache,
                     metrics_token=metrics_token, max_headers=max_headers,
                     embedder=load_embedder(embedder))
    bounds = HttpBounds(max_header_bytes=max_header_bytes, request_timeout=request_timeout,
                        keep_alive_timeout=keep_alive_timeout)
    # ownstate's own access log replaces uvicorn's: it names the caller, never the query.
    config = uvicorn_config(app, host=host, port=port, bounds=bounds, log_level=log_level,
                            access_log=False, log_config=None)
    uvicorn.Server(config).run()


def _refuse_unisolated(client: ownstate.Client, host: str, *, allowed: bool) -> None:
    """Warn when the database does not enforce tenant isolation for this connection, and
    refuse to listen beyond this machine so, unless ``allowed``."""
    from ownstate.server.serving import loopback

    bypass = client.isolation_bypass()
    if bypass is None:
        return
    if not allowed and not loopback(host):
        raise click.ClickException(
            f"{bypass}. Refusing to serve on {host}, which is not a loopback address; "
            "give --allow-rls-bypass to serve anyway")
    click.echo(f"Warning: {bypass}", err=True)


@cli.group()
def keys() -> None:
    """API keys for the HTTP server: each belongs to one principal of one tenant."""


@keys.command("create")
@click.option("--principal", required=True, help="Who the key is (a user or a service).")
@click.option("--admin", is_flag=True, help="May do everything in the tenant.")
@pass_options
def create_key(options: _Options, principal: str, admin: bool) -> None:
    """Make a key for the --tenant it acts for, and print its token, which is shown only
    this once."""
    with options.connect(tenant=options.required_tenant()) as client:
        key, token = client.api_keys.create(principal, admin=admin)
    click.echo(token)
    role = "admin" if key.admin else "principal"
    click.echo(f"key {key.key_id}: {role} {key.principal!r} of tenant {key.tenant!r}. "
               "Keep the token: it is not stored and cannot be shown again.", err=True)


@keys.command("list")
@pass_options
def list_keys(options: _Options) -> None:
    """Every key of the --tenant, revoked ones included."""
    with options.connect(tenant=options.required_tenant()) as client:
        found = client.api_keys.list()
    rows = [[k.key_id, k.principal, "yes" if k.admin else "", _when(k.create_time),
             _when(k.revoked_at) if k.revoked_at else ""] for k in found]
    click.echo(_table(["KEY", "PRINCIPAL", "ADMIN", "CREATED", "REVOKED"], rows))


@keys.command("revoke")
@click.argument("key_id")
@pass_options
def revoke_key(options: _Options, key_id: str) -> None:
    """Revoke a key of the --tenant: servers refuse it from now on (within their
    --key-cache seconds)."""
    with options.connect(tenant=options.required_tenant()) as client:
        key = client.api_keys.revoke(key_id)
    click.echo(f"revoked {key.key_id} ({key.principal!r} of tenant {key.tenant!r})")


# rendering -----------------------------------------------------------------------------


def render_transcript(session: ownstate.Session, *, width: int | None = None) -> str:
    """A readable transcript of ``session``: one block per item, in replay order.

    Each item shows its seq, time (UTC), role or type, and its text, wrapped to ``width``
    columns (the terminal's by default); model and token counts follow where known.
    """
    title = f"session {session.store}/{session.session_id} (actor {session.actor_id}"
    if session.parent_session_id is not None:
        title += f", forked from {session.parent_session_id}"
    lines = [click.style(title + ")", bold=True)]
    items = list(session.list_items(order_by="create_time asc"))
    if not items:
        lines.append("  (no items)")
    seq_width = max((len(str(item.seq)) for item in items), default=1)
    kind_width = max((len(_kind(item)) for item in items), default=1)
    columns = width if width is not None else shutil.get_terminal_size((100, 24)).columns
    for item in items:
        head = f"  {item.seq:>{seq_width}}  {item.create_time:%H:%M:%S}  "
        kind = _kind(item)
        indent = " " * (len(head) + kind_width + 2)
        text = _wrap(describe_item(item), max(columns - len(indent), 30))
        lines.append(head + click.style(kind.ljust(kind_width), bold=True) + "  " + text[0])
        lines.extend(indent + line for line in text[1:])
        usage = _usage(item)
        if usage:
            lines.append(indent + click.style(usage, dim=True))
    return "\n".join(line.rstrip() for line in lines)


def _wrap(text: str, width: int) -> list[str]:
    wrapped: list[str] = []
    for line in text.splitlines() or [""]:
        wrapped.extend(textwrap.wrap(line, width, break_on_hyphens=False) or [""])
    return wrapped


def describe_item(item: ownstate.Item) -> str:
    """The human-readable text of one item: a message's words, a call, a tool's output."""
    data = item.data
    if not isinstance(data, dict):
        return _compact(data)
    kind = data.get("type")
    if kind in {"function_call", "custom_tool_call", "mcp_call"}:
        arguments = data.get("arguments", data.get("input", ""))
        return f"{data.get('name', '?')}({_as_text(arguments)})"
    if isinstance(kind, str) and kind.endswith("_call_output"):
        return _as_text(data.get("output", ""))
    if kind == "reasoning":
        summary = _parts_text(data.get("summary"))
        return summary if summary is not None else "(reasoning)"
    if "content" in data and (kind in {None, "message"} or "role" in data):
        text = _parts_text(data["content"])
        calls = _chat_tool_calls(data.get("tool_calls"))
        shown = [part for part in (text, calls) if part]
        return "\n".join(shown)
    described = _compact(data)
    if item.tool_name is not None and kind != "function_call":
        described = f"[{item.tool_name}] {described}"
    return described


def _kind(item: ownstate.Item) -> str:
    if item.type == "message" and item.role is not None:
        return item.role
    return item.type or item.role or item.format


def _usage(item: ownstate.Item) -> str:
    shown = []
    if item.model is not None:
        shown.append(item.model)
    if item.in_tokens is not None or item.out_tokens is not None:
        shown.append(f"{item.in_tokens or 0} in / {item.out_tokens or 0} out tokens")
    return " · ".join(shown)


def _parts_text(content: Any) -> str | None:
    """The text of a message's content: a string, or a list of typed parts."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return _compact(content)
    pieces = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            pieces.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "refusal":
            pieces.append(f"(refused) {part.get('refusal', '')}")
        elif isinstance(part, dict) and isinstance(part.get("type"), str):
            pieces.append(f"[{part['type']}]")
        else:
            pieces.append(_compact(part))
    return "\n".join(pieces)


def _chat_tool_calls(calls: Any) -> str:
    """Chat Completions ``tool_calls`` as ``name(arguments)`` lines."""
    if not isinstance(calls, list):
        return ""
    shown = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            shown.append(f"{function.get('name', '?')}({_as_text(function.get('arguments'))})")
    return "\n".join(shown)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _compact(value)


def _compact(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) > UNKNOWN_ITEM_CHARS:
        return text[:UNKNOWN_ITEM_CHARS - 1] + "…"
    return text


def _when(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows,
                                                                          strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.extend("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows)
    return "\n".join(lines)


cli.add_command(import_command)
memory.add_command(distill_command)
cli.add_command(mcp_command)
cli.add_command(export_command)
cli.add_command(copy_command)


def main() -> None:
    """The ``ownstate`` console script."""
    cli(prog_name="ownstate")


if __name__ == "__main__":
    main()
