"""``ownstate memory distill``: the CLI shell over ``MemoryStore.distill``.

It distills one session (``--session``) or every session active within a span of time
(``--since``) into one memory store, with the chat-completions extractor configured by
options or the environment. It uses only the public sync API and prints one line per
session; the exit status is 1 when any session failed (its run is recorded as failed).

It may touch the public sync API (``ownstate``), the command's shared pieces
(``ownstate.cli_common``), :mod:`.chat`, and click.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import click

import ownstate
from ownstate.cli_common import Duration, find_session

from .chat import ChatCompletionsExtractor

__all__ = ["distill_command"]

_KEY_VARIABLES = ("OWNSTATE_DISTILL_API_KEY", "OPENAI_API_KEY")


def _recent(client: ownstate.Client, store: str | None,
            since: float) -> list[ownstate.Session]:
    """The sessions (of ``store``, else of every session store) active within ``since``
    seconds, most recently active first within each store."""
    cutoff = datetime.now(UTC) - timedelta(seconds=since)
    stores = ([client.session_stores.get(store)] if store is not None
              else list(client.session_stores.list()))
    found: list[ownstate.Session] = []
    for each in stores:
        for session in each.list_sessions(order_by="last_activity_time desc"):
            if session.last_activity_time < cutoff:
                break
            found.append(session)
    return found


def _report(session: ownstate.Session, done: ownstate.Distillation) -> str:
    where = f"{session.store}/{session.session_id}"
    if done.run_id is None:
        return f"{where}: nothing new"
    return (f"{where}: read {done.items_read} items (seq {done.from_seq + 1}-{done.to_seq}), "
            f"wrote {len(done.facts)} facts, {done.unchanged} unchanged, "
            f"{done.below_threshold} below threshold, {done.rejected} rejected "
            f"(run {done.run_id})")


@click.command("distill")
@click.option("--store", required=True, help="The memory store to write facts into.")
@click.option("--session", "session_id", help="Distill this session.")
@click.option("--session-store", help="The session store of --session, or the only one "
                                      "--since looks in (default: every session store).")
@click.option("--since", type=Duration(),
              help="Distill every session active within this span (e.g. 1h).")
@click.option("--subject", help="The subject facts are about (default: each session's "
                                "actor id).")
@click.option("--model", envvar="OWNSTATE_DISTILL_MODEL", show_envvar=True, required=True,
              help="The chat model to extract facts with.")
@click.option("--base-url", envvar="OWNSTATE_DISTILL_BASE_URL", show_envvar=True,
              help="The OpenAI-compatible API root, before /chat/completions (default: "
                   "OPENAI_BASE_URL, else OpenAI's). The API key is read from "
                   "OWNSTATE_DISTILL_API_KEY, else OPENAI_API_KEY.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Seconds to wait for each answer of the endpoint.")
@click.option("--min-confidence", type=click.FloatRange(0, 1), default=0.5,
              show_default=True, help="Skip candidate facts less sure than this.")
@click.option("--batch-size", type=click.IntRange(min=1), default=100, show_default=True,
              help="Items sent to the model at once.")
@click.pass_context
def distill_command(ctx: click.Context, store: str, session_id: str | None,
                    session_store: str | None, since: float | None, subject: str | None,
                    model: str, base_url: str | None, timeout: float, min_confidence: float,
                    batch_size: int) -> None:
    """Learn durable facts from sessions' new items into a memory store.

    Each session is read from where its last distillation into STORE stopped; a fact equal
    to the current one writes nothing, a new value supersedes it with the item it came
    from as its source. Every pass is recorded as a run (framework ownstate.distill).
    """
    if (session_id is None) == (since is None):
        raise click.UsageError("give --session ID or --since SPAN, one of them")
    api_key = next((os.environ[v] for v in _KEY_VARIABLES if os.environ.get(v)), None)
    options = ctx.find_root().obj
    with options.connect() as client, ChatCompletionsExtractor(
            model, base_url=base_url, api_key=api_key, timeout=timeout) as extractor:
        mem = client.memory_stores.get(store)
        sessions = ([find_session(client, session_id, session_store, option="--session-store")]
                    if session_id is not None else _recent(client, session_store, since or 0))
        failed = 0
        for session in sessions:
            try:
                done = mem.distill(session, extractor=extractor, subject=subject,
                                   min_confidence=min_confidence, batch_size=batch_size)
            except ownstate.ActiveRunExists as exc:
                click.echo(f"{session.store}/{session.session_id}: skipped, run "
                           f"{exc.details.get('run_id')} is active", err=True)
                continue
            except ownstate.OwnstateError as exc:
                failed += 1
                run = exc.details.get("run_id")
                click.echo(f"{session.store}/{session.session_id}: failed: "
                           f"{' '.join(exc.message.split())}"
                           + (f" (run {run})" if run else ""), err=True)
                continue
            click.echo(_report(session, done))
        if not sessions:
            click.echo("no session to distill", err=True)
    if failed:
        ctx.exit(1)
