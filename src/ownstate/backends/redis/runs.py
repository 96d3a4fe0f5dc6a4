"""Runs, leases and effects in Redis.

A run lives in its session's tree: the hash ``{T/S/R}:r:RUN`` and its effects ledger
``{T/S/R}:e:RUN``; the session's ``active`` field names its running-or-awaiting run and
``runs:X`` lists its runs. So the one-active-run rule, every claim and every fenced write
is one script on one slot: the check and the change it guards are one atomic step.

The tenant's slot holds the run directory (``{T}:runs``: run id -> store and session, which
also makes run ids unique in the tenant), ``run-order`` (every run by when it was opened,
for listings) and ``run-active`` (runs that may be running or awaiting, for
``outstanding`` and the decision listings). Opening a run claims its id in the directory
first, then creates it in the tree; a refused open withdraws the claim. A claim whose run
never appeared (its opener stopped in between) is taken over by a later open after a
minute.

A decision is one script on the run's slot (``dc`` holds the current request's decision,
``dl`` every decision, comma-joined JSON objects); the backend then publishes on the
channel ``PREFIX:decided``, on which every process waiting for a decision holds one
subscription (on a single Redis; on Redis Cluster waiters check within a second).

It may touch Redis through ``_core``, decision waiting (``backends._decisions``), the run
port, the time format (``ownstate._ids``), the model and errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..._ids import format_time, parse_time
from ...errors import (
    ActiveRunExists,
    AlreadyExists,
    BackendUnavailable,
    LeaseHeld,
    OwnstateError,
    RunClosed,
    RunNotFound,
    SessionNotFound,
    StaleLease,
)
from ...model import ACTIVE_RUN_STATUSES, Decision, Effect, Lease, Run
from .._decisions import Listener, Signalled
from ..ports.runs import decision_refusal, opening_lease
from ._core import CLAIM_GRACE_MS, RedisCore, Reply, claim_age_ms, lua, text

__all__ = ["RunsInRedis", "micros"]

_FIELDS = ("store", "sid", "actor", "fw", "tk", "st", "aw", "steps", "cost", "started",
           "ended", "lo", "le", "tok", "since", "ord", "dc", "dl")
_RETURN_RUN = ("local g = redis.call('HMGET', rkey, "
               + ", ".join(f"'{f}'" for f in _FIELDS) + ")\n"
               + "return {'ok', " + ", ".join(f"g[{i}]" for i in range(1, len(_FIELDS) + 1))
               + "}\n")
_OPEN = "f[1] == 'running' or f[1] == 'awaiting_human'"


def micros(moment: datetime) -> int:
    """Microseconds since the epoch: how scripts compare times."""
    delta = moment - datetime(1970, 1, 1, tzinfo=moment.tzinfo)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(value: Any) -> datetime | None:
    return parse_time(text(value)) if value is not None else None


def _run(run_id: str, f: Sequence[Any]) -> Run:
    return Run(
        run_id=run_id, store=text(f[0]), session_id=text(f[1]), actor_id=text(f[2]),
        framework=text(f[3]), thread_key=None if f[4] is None else text(f[4]),
        status=text(f[5]), awaiting=json.loads(f[6]) if f[6] is not None else None,
        step_count=int(f[7]), usd_cost=float(f[8]), started_at=parse_time(text(f[9])),
        ended_at=_time(f[10]), lease_owner=None if f[11] is None else text(f[11]),
        lease_expires_at=_time(f[12]), fencing_token=int(f[13]),
        decision=Decision.from_json(json.loads(f[16])) if f[16] is not None else None,
        decisions=tuple(Decision.from_json(d) for d in json.loads(
            b"[" + (f[17] or b"") + b"]")),
    )


# -- the tenant's directory -------------------------------------------------------------

# ARGV: run id, store, session, nonce, claim to take over ('' for none).
lua("run_claim", """
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local cur = redis.call('HGET', base .. 'runs', ARGV[1])
if cur and cur ~= ARGV[5] then return {'@taken', cur, now_ms} end
local value = ARGV[2] .. '\\0' .. ARGV[3] .. '\\0' .. now_ms .. '\\0' .. ARGV[4]
redis.call('HSET', base .. 'runs', ARGV[1], value)
local ord = redis.call('INCR', base .. 'run-seq')
redis.call('ZADD', base .. 'run-order', ord, ARGV[1])
redis.call('SADD', base .. 'run-active', ARGV[1])
return {'ok', ord, value}
""")

lua("runs_inactive", """
for i = 1, #ARGV do redis.call('SREM', base .. 'run-active', ARGV[i]) end
return {'ok'}
""")

# -- the run, in its session's tree -----------------------------------------------------

# ARGV[3..13]: run id, ordinal, directory value, store, framework, thread key, owner,
# lease expiry, its microseconds, fencing token, time.
lua("run_open", """
local run = ARGV[3]
local rkey = base .. 'r:' .. run
local active = redis.call('HGET', skey, 'active')
if active then
  local st = redis.call('HGET', base .. 'r:' .. active, 'st')
  if st == 'running' or st == 'awaiting_human' then return {'@active', active} end
end
if redis.call('EXISTS', rkey) == 1 then return {'@exists'} end
local actor = redis.call('HGET', skey, 'actor')
redis.call('HSET', rkey, 'store', ARGV[6], 'sid', sid, 'actor', actor, 'fw', ARGV[7],
           'st', 'running', 'since', ARGV[13], 'steps', 0, 'cost', '0',
           'started', ARGV[13], 'tok', ARGV[12], 'ord', ARGV[4], 'dir', ARGV[5])
if ARGV[8] ~= '' then redis.call('HSET', rkey, 'tk', ARGV[8]) end
if ARGV[9] ~= '' then redis.call('HSET', rkey, 'lo', ARGV[9], 'le', ARGV[10], 'leu', ARGV[11]) end
redis.call('HSET', skey, 'active', run)
redis.call('ZADD', base .. 'runs:' .. sid, ARGV[4], run)
return {'ok', actor}
""", on="tree")

lua("run_get", _RETURN_RUN, on="run")

# ARGV[3..4]: the upper bound on ordinals (exclusive as '(N', or '+inf'), how many.
lua("session_runs", """
local out = redis.call('ZREVRANGEBYSCORE', base .. 'runs:' .. sid, ARGV[3], '-inf',
                       'WITHSCORES', 'LIMIT', 0, ARGV[4])
table.insert(out, 1, 'ok')
return out
""", on="tree")

# ARGV[4..6]: awaiting JSON, fencing token ('' for none), time.
lua("run_mark_awaiting", f"""
local f = redis.call('HMGET', rkey, 'st', 'tok')
if ARGV[5] ~= '' and tonumber(ARGV[5]) ~= tonumber(f[2]) then return {{'@stale', f[2]}} end
if not ({_OPEN}) then return {{'@closed', f[1]}} end
redis.call('HSET', rkey, 'st', 'awaiting_human', 'aw', ARGV[4], 'since', ARGV[6])
redis.call('HDEL', rkey, 'lo', 'le', 'leu', 'dc')
""" + _RETURN_RUN, on="run")

# ARGV[4..8]: owner, lease expiry, its microseconds, time, its microseconds.
lua("run_resume", f"""
local f = redis.call('HMGET', rkey, 'st', 'lo', 'le', 'leu')
if not ({_OPEN}) then return {{'@closed', f[1]}} end
if f[2] and f[2] ~= ARGV[4] and tonumber(f[4]) > tonumber(ARGV[8]) then
  return {{'@held', f[2], f[3]}}
end
local tok = redis.call('HINCRBY', rkey, 'tok', 1)
redis.call('HSET', rkey, 'st', 'running', 'since', ARGV[7], 'lo', ARGV[4], 'le', ARGV[5],
           'leu', ARGV[6])
redis.call('HDEL', rkey, 'aw')
return {{'ok', tok}}
""", on="run")

# ARGV[4..6]: fencing token, lease expiry, its microseconds.
lua("run_heartbeat", f"""
local f = redis.call('HMGET', rkey, 'st', 'tok', 'lo')
if tonumber(ARGV[4]) ~= tonumber(f[2]) then return {{'@stale', f[2]}} end
if not ({_OPEN}) then return {{'@closed', f[1]}} end
if not f[3] then return {{'@nolease', f[2]}} end
redis.call('HSET', rkey, 'le', ARGV[5], 'leu', ARGV[6])
return {{'ok', f[3]}}
""", on="run")

# ARGV[4..8]: status, cost to add, step count ('' to keep), fencing token ('' for none),
# time.
lua("run_close", f"""
local f = redis.call('HMGET', rkey, 'st', 'tok')
if ARGV[7] ~= '' and tonumber(ARGV[7]) ~= tonumber(f[2]) then return {{'@stale', f[2]}} end
if not ({_OPEN}) then return {{'@closed', f[1]}} end
redis.call('HSET', rkey, 'st', ARGV[4], 'since', ARGV[8], 'ended', ARGV[8])
redis.call('HDEL', rkey, 'lo', 'le', 'leu')
redis.call('HINCRBYFLOAT', rkey, 'cost', ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', rkey, 'steps', ARGV[6]) end
if redis.call('HGET', skey, 'active') == run then redis.call('HDEL', skey, 'active') end
""" + _RETURN_RUN, on="run")

# ARGV[4..7]: tool call id, result JSON, fencing token ('' for none), time.
lua("run_record_effect", f"""
local f = redis.call('HMGET', rkey, 'st', 'tok')
if ARGV[6] ~= '' and tonumber(ARGV[6]) ~= tonumber(f[2]) then return {{'@stale', f[2]}} end
local earlier = redis.call('HGET', base .. 'e:' .. run, ARGV[4])
if earlier then return {{'@old', earlier}} end
if not ({_OPEN}) then return {{'@closed', f[1]}} end
redis.call('HSET', base .. 'e:' .. run, ARGV[4], ARGV[7] .. '\\n' .. ARGV[5])
return {{'ok'}}
""", on="run")

# ARGV[4]: the decision as JSON.
lua("run_decide", """
local f = redis.call('HMGET', rkey, 'st', 'dc')
if f[1] ~= 'awaiting_human' then return {'@notawaiting', f[1]} end
if f[2] then return {'@decided', cjson.decode(f[2])['outcome']} end
local log = redis.call('HGET', rkey, 'dl')
redis.call('HSET', rkey, 'dc', ARGV[4], 'dl', log and (log .. ',' .. ARGV[4]) or ARGV[4])
""" + _RETURN_RUN, on="run")

lua("run_get_effect", """
return {'ok', redis.call('HGET', base .. 'e:' .. run, ARGV[4])}
""", on="run")


def _effect(run_id: str, tool_call_id: str, stored: bytes, recorded: bool) -> Effect:
    stamp, _, result = stored.partition(b"\n")
    return Effect(run_id, tool_call_id, json.loads(result), parse_time(stamp.decode()),
                  recorded)


class RunsInRedis(RedisCore, Signalled):
    def _homes(self) -> dict[tuple[str, str], tuple[str, str]]:
        if len(self._run_homes) > 100_000:
            self._run_homes.clear()
        return self._run_homes

    @staticmethod
    def _not_found(run_id: str) -> RunNotFound:
        return RunNotFound(run_id=run_id)

    async def _run_home(self, tenant: str, run_id: str) -> tuple[str, str] | None:
        value = await self._command("HGET", self.tenant_key(tenant) + "runs", run_id,
                                    write=False)
        if value is None:
            return None
        store, session_id = text(value).split("\x00")[:2]
        return store, session_id

    async def _run_call(self, tenant: str, run_id: str, name: str, args: Sequence[Any], *,
                        write: bool = True) -> Reply:
        """Run a run script in the run's tree. Raises RunNotFound (the same error, with
        the same message, whatever the reason)."""
        homes = self._homes()
        home = homes.get((tenant, run_id))
        cached = home is not None
        for _ in range(2):
            if home is None:
                home = await self._run_home(tenant, run_id)
                if home is None:
                    break
            try:
                _, reply = await self._tree(tenant, home[0], home[1], name, [run_id, *args],
                                            write=write)
            except SessionNotFound:
                reply = [b"@norun"]
            if reply[0] != b"@norun":
                homes[(tenant, run_id)] = home
                return reply
            homes.pop((tenant, run_id), None)
            if not cached:
                break
            home, cached = None, False
        raise self._not_found(run_id)

    @staticmethod
    def _refusal(run_id: str, reply: Reply, fencing_token: int | None) -> OwnstateError:
        status = reply[0]
        if status in (b"@stale", b"@nolease"):  # a newer token; the token, but no lease
            return StaleLease(run_id=run_id, fencing_token=fencing_token, current=int(reply[1]))
        if status == b"@closed":
            return RunClosed(run_id=run_id, status=text(reply[1]))
        if status == b"@held":
            owner, until = text(reply[1]), parse_time(text(reply[2]))
            return LeaseHeld(run_id=run_id, owner=owner, expires_at=until)
        return BackendUnavailable(f"run {run_id!r} changed in an unexpected way; retry")

    async def _unclaim(self, tenant: str, run_id: str, value: str) -> None:
        await self._eval("unclaim_runs", [self.tenant_key(tenant)], [run_id, value])

    async def _claim_run(self, tenant: str, store: str, session_id: str,
                         run_id: str) -> tuple[int, str]:
        nonce = self.nonce()
        takeover = ""
        for _ in range(3):
            reply = await self._eval("run_claim", [self.tenant_key(tenant)],
                                     [run_id, store, session_id, nonce, takeover])
            if reply[0] == b"ok":
                return int(reply[1]), text(reply[2])
            current = text(reply[1])
            if claim_age_ms(current, int(reply[2])) < CLAIM_GRACE_MS:
                break
            other_store, other_session = current.split("\x00")[:2]
            try:
                _, found = await self._tree(tenant, other_store, other_session, "run_get",
                                            [run_id], write=False)
            except SessionNotFound:
                found = [b"@norun"]
            if found[0] != b"@norun":
                break
            takeover = current
        raise AlreadyExists(run_id=run_id)

    # runs ------------------------------------------------------------------------------

    async def open_run(self, tenant: str, store: str, session_id: str, run_id: str,
                       framework: str, thread_key: str | None, owner: str | None,
                       ttl_seconds: float, now: datetime) -> Run:
        expires, token = opening_lease(owner, ttl_seconds, now)
        ordinal, value = await self._claim_run(tenant, store, session_id, run_id)
        try:
            _, reply = await self._tree(
                tenant, store, session_id, "run_open",
                [run_id, ordinal, value, store, framework, thread_key or "", owner or "",
                 format_time(expires) if expires else "", micros(expires) if expires else "",
                 token, format_time(now)])
        except SessionNotFound:
            await self._unclaim(tenant, run_id, value)
            raise
        if reply[0] == b"@active":
            await self._unclaim(tenant, run_id, value)
            active = text(reply[1])
            raise ActiveRunExists(
                store=store, session_id=session_id, run_id=active)
        if reply[0] != b"ok":
            await self._unclaim(tenant, run_id, value)
            raise AlreadyExists(run_id=run_id)
        self._homes()[(tenant, run_id)] = (store, session_id)
        return Run(
            run_id=run_id, store=store, session_id=session_id, actor_id=text(reply[1]),
            framework=framework, thread_key=thread_key, status="running", awaiting=None,
            step_count=0, usd_cost=0.0, started_at=now, ended_at=None, lease_owner=owner,
            lease_expires_at=expires, fencing_token=token,
        )

    async def get_run(self, tenant: str, run_id: str) -> Run:
        reply = await self._run_call(tenant, run_id, "run_get", [], write=False)
        return _run(run_id, reply[1:])

    async def _locate_runs(self, tenant: str, run_ids: Sequence[str], *,
                           store: str | None = None, session_id: str | None = None,
                           ) -> dict[str, tuple[str, str, str]]:
        """Where each existing run among ``run_ids`` lives: ``(store, session, root)``
        (only those in the given store and session, when named)."""
        if not run_ids:
            return {}
        values = await self._command("HMGET", self.tenant_key(tenant) + "runs", *run_ids,
                                     write=False)
        wanted: list[tuple[str, str, str, str]] = []
        for run_id, value in zip(run_ids, values, strict=True):
            if value is None:
                continue
            home_store, home_session = text(value).split("\x00")[:2]
            if (store is not None and home_store != store) or (
                    session_id is not None and home_session != session_id):
                continue
            root = self._root_guess(tenant, home_store, home_session)
            wanted.append((run_id, home_store, home_session, root))
        found = await self._read([
            ("HGET", self.tree_key(tenant, s, root) + "r:" + r, "sid")
            for r, s, _, root in wanted])
        located: dict[str, tuple[str, str, str]] = {}
        for (run_id, home_store, home_session, root), sid in zip(wanted, found, strict=True):
            if sid is None or text(sid) != home_session:
                # a fork this process has not met yet: find its tree
                try:
                    root, _ = await self._tree(tenant, home_store, home_session, "run_get",
                                               [run_id], write=False)
                except SessionNotFound:
                    continue
                sid = await self._command("HGET", self.tree_key(tenant, home_store, root)
                                          + "r:" + run_id, "sid", write=False)
                if sid is None or text(sid) != home_session:
                    continue
            located[run_id] = (home_store, home_session, root)
        return located

    async def _fetch_runs(self, tenant: str, run_ids: Sequence[str], *,
                          store: str | None = None, session_id: str | None = None,
                          ) -> dict[str, tuple[Run, datetime, int]]:
        """The runs that exist among ``run_ids`` (in the given store and session, when
        named), with when each entered its status and its ordinal."""
        located = await self._locate_runs(tenant, run_ids, store=store, session_id=session_id)
        rows = await self._read([
            ("HMGET", self.tree_key(tenant, s, root) + "r:" + r, *_FIELDS)
            for r, (s, _, root) in located.items()])
        found: dict[str, tuple[Run, datetime, int]] = {}
        for run_id, row in zip(located, rows, strict=True):
            if row[0] is not None:
                found[run_id] = (_run(run_id, row), parse_time(text(row[14])), int(row[15]))
        return found

    async def list_runs(self, tenant: str, *, store: str | None, session_id: str | None,
                        status: str | None, framework: str | None, limit: int,
                        after: Sequence[Any] | None) -> tuple[list[Run], list[Any] | None]:
        order = self.tenant_key(tenant) + "run-order"
        bound = f"({int(after[0])}" if after is not None else "+inf"
        chosen: list[tuple[int, Run]] = []
        while len(chosen) <= limit:
            batch = limit + 1 - len(chosen) + 8
            if store is not None and session_id is not None:
                # one session's runs: its own index, in its tree (same ordinals)
                try:
                    _, reply = await self._tree(tenant, store, session_id, "session_runs",
                                                [bound, batch], write=False)
                except SessionNotFound:
                    break
                raw = [(reply[i], reply[i + 1]) for i in range(1, len(reply), 2)]
            else:
                raw = await self._command("ZREVRANGEBYSCORE", order, bound, "-inf",
                                          "WITHSCORES", "LIMIT", 0, batch, write=False)
            pairs = [(text(member), int(float(score))) for member, score in raw]
            ids = [run_id for run_id, _ in pairs]
            if not ids:
                break
            found = await self._fetch_runs(tenant, ids, store=store, session_id=session_id)
            for run_id in ids:
                if run_id not in found:
                    continue
                run, _, ordinal = found[run_id]
                if (status is None or run.status == status) and (
                        framework is None or run.framework == framework):
                    chosen.append((ordinal, run))
            bound = f"({pairs[-1][1]}"
            if len(ids) < batch:
                break
        page = chosen[:limit]
        cursor = [page[-1][0]] if len(chosen) > limit else None
        return [run for _, run in page], cursor

    async def mark_awaiting(self, tenant: str, run_id: str, awaiting_json: str,
                            fencing_token: int | None, now: datetime) -> Run:
        reply = await self._run_call(
            tenant, run_id, "run_mark_awaiting",
            [awaiting_json, "" if fencing_token is None else fencing_token, format_time(now)])
        if reply[0] != b"ok":
            raise self._refusal(run_id, reply, fencing_token)
        return _run(run_id, reply[1:])

    async def resume(self, tenant: str, run_id: str, owner: str, ttl_seconds: float,
                     now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)
        reply = await self._run_call(
            tenant, run_id, "run_resume",
            [owner, format_time(expires), micros(expires), format_time(now), micros(now)])
        if reply[0] != b"ok":
            raise self._refusal(run_id, reply, None)
        return Lease(run_id, owner, int(reply[1]), expires)

    async def heartbeat(self, tenant: str, run_id: str, fencing_token: int,
                        ttl_seconds: float, now: datetime) -> Lease:
        expires = now + timedelta(seconds=ttl_seconds)
        reply = await self._run_call(tenant, run_id, "run_heartbeat",
                                     [fencing_token, format_time(expires), micros(expires)])
        if reply[0] != b"ok":
            raise self._refusal(run_id, reply, fencing_token)
        return Lease(run_id, text(reply[1]), fencing_token, expires)

    async def close_run(self, tenant: str, run_id: str, status: str, usd_cost: float | None,
                        step_count: int | None, fencing_token: int | None,
                        now: datetime) -> Run:
        reply = await self._run_call(
            tenant, run_id, "run_close",
            [status, repr(float(usd_cost or 0.0)), "" if step_count is None else step_count,
             "" if fencing_token is None else fencing_token, format_time(now)])
        if reply[0] != b"ok":
            raise self._refusal(run_id, reply, fencing_token)
        await self._eval("runs_inactive", [self.tenant_key(tenant)], [run_id])
        return _run(run_id, reply[1:])

    async def outstanding(self, tenant: str, status: str, framework: str | None,
                          entered_before: datetime | None, limit: int) -> list[Run]:
        active = self.tenant_key(tenant) + "run-active"
        ids = sorted(text(r) for r in await self._command("SMEMBERS", active, write=False))
        found = await self._fetch_runs(tenant, ids)
        ended = [r for r, (run, _, _) in found.items() if run.status not in ACTIVE_RUN_STATUSES]
        if ended:
            await self._eval("runs_inactive", [self.tenant_key(tenant)], ended)
        chosen = sorted(
            ((since, ordinal, run) for run, since, ordinal in found.values()
             if run.status == status
             and (status != "awaiting_human" or run.decision is None)
             and (framework is None or run.framework == framework)
             and (entered_before is None or since < entered_before)),
            key=lambda entry: (entry[0], entry[1]))
        return [run for _, _, run in chosen[:limit]]

    # decisions -------------------------------------------------------------------------

    def _decision_channel(self) -> str:
        return f"{self.prefix}:decided"

    async def decide(self, tenant: str, run_id: str, decision: Decision) -> Run:
        text_json = json.dumps(decision.to_json(), separators=(",", ":"))
        reply = await self._run_call(tenant, run_id, "run_decide", [text_json])
        if reply[0] != b"ok":
            standing = text(reply[1]) if reply[0] == b"@decided" else None
            status = text(reply[1]) if reply[0] == b"@notawaiting" else "awaiting_human"
            raise decision_refusal(run_id, status, standing)
        self.decision_signal.fire()
        await self._command("PUBLISH", self._decision_channel(), b"", write=True)
        return _run(run_id, reply[1:])

    async def list_awaiting(self, tenant: str, *, decided: bool, framework: str | None,
                            stores: frozenset[str] | None, limit: int,
                            after: Sequence[Any] | None
                            ) -> tuple[list[Run], list[Any] | None]:
        active = self.tenant_key(tenant) + "run-active"
        ids = sorted(text(r) for r in await self._command("SMEMBERS", active, write=False))
        found = await self._fetch_runs(tenant, ids)
        start = (str(after[0]), int(after[1])) if after is not None else None
        chosen = sorted(
            (entry for entry in ((format_time(since), ordinal, run)
                                 for run, since, ordinal in found.values())
             if entry[2].status == "awaiting_human"
             and (entry[2].decision is not None) == decided
             and (framework is None or entry[2].framework == framework)
             and (stores is None or entry[2].store in stores)
             and (start is None or (entry[0], entry[1]) > start)),
            key=lambda entry: (entry[0], entry[1]))
        page = chosen[:limit]
        cursor = [page[-1][0], page[-1][1]] if len(chosen) > limit else None
        return [run for _, _, run in page], cursor

    def _decision_wait_bound(self) -> float:
        # announced on a single Redis; the bound covers a listener that lost its connection
        return 1.0 if self.cluster else 5.0

    def _decision_listener(self) -> Listener | None:
        if self.cluster:
            return None
        return self.announced_by(self._listen_for_decisions)

    async def _listen_for_decisions(self, ready: Callable[[], None],
                                    fire: Callable[[], None]) -> None:
        pubsub = self._r.pubsub()
        try:
            await pubsub.subscribe(self._decision_channel())
            ready()
            async for message in pubsub.listen():
                if message.get("type") == b"message" or message.get("type") == "message":
                    fire()
        finally:
            await pubsub.aclose()

    # effects ---------------------------------------------------------------------------

    async def record_effect(self, tenant: str, run_id: str, tool_call_id: str,
                            result_json: str, fencing_token: int | None,
                            now: datetime) -> Effect:
        reply = await self._run_call(
            tenant, run_id, "run_record_effect",
            [tool_call_id, result_json, "" if fencing_token is None else fencing_token,
             format_time(now)])
        if reply[0] == b"@old":
            return _effect(run_id, tool_call_id, reply[1], False)
        if reply[0] != b"ok":
            raise self._refusal(run_id, reply, fencing_token)
        return Effect(run_id, tool_call_id, json.loads(result_json), now, True)

    async def get_effect(self, tenant: str, run_id: str, tool_call_id: str) -> Effect | None:
        reply = await self._run_call(tenant, run_id, "run_get_effect", [tool_call_id],
                                     write=False)
        if reply[1] is None:
            return None
        return _effect(run_id, tool_call_id, reply[1], False)
