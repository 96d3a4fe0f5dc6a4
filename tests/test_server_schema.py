"""The OpenAPI document against the server itself, with schemathesis, and the inputs
no document describes, with hypothesis.

Every operation gets generated requests, valid and invalid ones alike, with an admin key:
no answer may be a 5xx, every answer must match the document (status, media type, body
schema), and a request that breaks the document must be refused with a 4xx. JSON nested
deeply or holding integers wider than 64 bits (in bodies, a query parameter, a header)
and forged page tokens get a 4xx too.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

import ownstate
from ownstate._tokens import encode_token
from ownstate.limits import MAX_JSON_DEPTH
from ownstate.server import create_app
from ownstate.testing.server import LiveServer

_EXAMPLES = int(os.environ.get("OWNSTATE_FUZZ_EXAMPLES", "30"))
_DATABASE = f"memory://schemathesis-{uuid.uuid4().hex}"
with ownstate.connect(_DATABASE, tenant="fuzz") as _direct:
    _, TOKEN = _direct.api_keys.create("fuzzer", admin=True)
    _direct.session_stores.create("fuzz-store")
    _direct.memory_stores.create("fuzz-memory")

APP = create_app(_DATABASE)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=_EXAMPLES,
    deterministic=bool(os.environ.get("CI")),
)
# A request the document allows may still be refused for what only the server can know (a
# page token it did not issue, a name already taken): that is a 4xx by design, so the
# check that every schema-valid request succeeds does not apply.
schema.config.checks.update(excluded_check_names=["positive_data_acceptance"])


@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None)
def test_every_operation_conforms_to_the_document(case: Any) -> None:
    case.call_and_validate(headers={"authorization": f"Bearer {TOKEN}"})


# inputs the document cannot describe -----------------------------------------------------
#
# JSON nested past every parser's patience, integers wider than any column, and page tokens
# whose checksum is right but whose position no datastore holds: generated against SQLite,
# which crashed on the latter two, and answered alike (400) wherever they are accepted.

_API = "/api/2.0/agents"
#: What a signed 64-bit column holds (stated here, not imported: the tests' own oracle).
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1
_SESSION = f"{_API}/session-stores/fuzz-store/sessions/s1"

#: An integer: mostly within 64 bits, often just past either end, sometimes far past.
integers = st.one_of(st.integers(MIN_INT64, MAX_INT64), st.integers(MAX_INT64 + 1, 2**70),
                     st.integers(-(2**70), MIN_INT64 - 1), st.integers(-(10**40), 10**40))
#: JSON text: a value of ordinary shape holding such integers, or one nested deeply.
json_text = st.one_of(
    st.recursive(integers | st.text(max_size=4) | st.booleans() | st.none(),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                 max_leaves=12).map(json.dumps),
    st.integers(MAX_JSON_DEPTH - 2, 1500).map(lambda n: "[" * n + "1" + "]" * n),
)


def _acceptable(text: str) -> bool:
    """Whether ``text`` is JSON any stored value may be: at most ``MAX_JSON_DEPTH`` levels
    of arrays and objects, every integer within 64 bits."""
    try:
        value = json.loads(text)
    except RecursionError:
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth + 1 > MAX_JSON_DEPTH:
                return False
            stack.extend((child, depth + 1)
                         for child in (node.values() if isinstance(node, dict) else node))
        elif isinstance(node, int) and not MIN_INT64 <= node <= MAX_INT64:
            return False
    return True


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, str]]:
    """An admin client of a live server on SQLite with a session and a run in it, and the
    run's checkpoints path."""
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('fuzz')) / 'fuzz.db'}"
    with ownstate.connect(url, tenant="fuzz") as direct:
        _, token = direct.api_keys.create("fuzzer", admin=True)
        session = direct.session_stores.create("fuzz-store").add(actor_id="a",
                                                                  session_id="s1")
        session.append_items([{"n": n} for n in range(3)])
        run = direct.runs.open_run(session, framework="test")
        direct.memory_stores.create("fuzz-memory")
    live = LiveServer(url)
    try:
        with httpx.Client(base_url=live.url, timeout=30,
                          headers={"authorization": f"Bearer {token}",
                                   "content-type": "application/json"}) as http:
            yield http, f"{_SESSION}/runs/{run.run_id}/checkpoints"
    finally:
        live.stop()


def _answer(response: httpx.Response, acceptable: bool) -> None:
    assert response.status_code < 500, response.text
    if not acceptable:
        assert response.status_code == 400, response.text


@given(text=json_text)
@settings(suppress_health_check=list(HealthCheck), deadline=None, max_examples=_EXAMPLES)
def test_json_bodies_deep_or_wide_get_a_4xx(fuzzed: tuple[httpx.Client, str],
                                            text: str) -> None:
    http, checkpoints = fuzzed
    ok = _acceptable(text)
    _answer(http.post(f"{_SESSION}/items:append",
                      content='{"items": [{"data": {"v": ' + text + "}}]}"), ok)
    _answer(http.post(f"{_API}/memory-stores/fuzz-memory/facts",
                      content='{"subject": "user:1", "key": "k", "value": ' + text + "}"), ok)
    metadata = '{"k": ' + text + "}"
    _answer(http.get(checkpoints, params={"actor_id": "a", "metadata": metadata}),
            ok and len(metadata) <= 8192)
    _answer(http.post(f"{_API}/assets", params={"store": "fuzz-store", "session_id": "s1"},
                      content=b"x", headers={"content-type": "text/plain",
                                             "x-ownstate-metadata": metadata}),
            ok and '"k": "' in metadata)


@given(position=st.lists(integers, min_size=1, max_size=2))
@settings(suppress_health_check=list(HealthCheck), deadline=None, max_examples=_EXAMPLES)
def test_forged_page_tokens_get_a_4xx(fuzzed: tuple[httpx.Client, str],
                                      position: list[int]) -> None:
    http, _ = fuzzed
    token = http.get(f"{_SESSION}/items", params={"page_size": 1}).json()["next_page_token"]
    listing = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))[4:])[0]
    forged = encode_token(listing, position)
    wide = any(not MIN_INT64 <= p <= MAX_INT64 for p in position)
    response = http.get(f"{_SESSION}/items", params={"page_size": 1, "page_token": forged})
    _answer(response, not wide)
