"""Errors word their own messages from their ids, and survive pickling and problem+json."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest

from ownstate import _wire, errors

_WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

#: every error that can be built from its ids alone, with those ids and the message
BUILT: list[tuple[type[errors.OwnstateError], dict[str, object], str]] = [
    (errors.StoreNotFound, {"store": "s"}, "no store 's'"),
    (errors.SessionNotFound, {"store": "s", "session_id": "x"}, "no session 'x' in store 's'"),
    (errors.ItemNotFound, {"session_id": "x", "item_id": "i"}, "no item 'i' in session 'x'"),
    (errors.FactNotFound, {"store": "m", "fact_id": "f"}, "no fact 'f' in memory store 'm'"),
    (errors.RunNotFound, {"run_id": "r"}, "no run 'r'"),
    (errors.CheckpointNotFound, {"run_id": "r", "checkpoint_id": "c", "namespace": ""},
     "no checkpoint 'c' in run 'r'"),
    (errors.AssetNotFound, {"asset_id": "a"}, "no asset 'a'"),
    (errors.KeyNotFound, {"key_id": "k"}, "no API key 'k'"),
    (errors.AlreadyExists, {"run_id": "r"}, "run 'r' already exists"),
    (errors.AlreadyExists, {"key_id": "k"}, "an API key 'k' exists"),
    (errors.AlreadyExists, {"store": "s", "session_id": "x"},
     "session 'x' already exists in store 's'"),
    (errors.AlreadyExists, {"store": "s"}, "store 's' already exists"),
    (errors.HasChildren, {"store": "s", "session_id": "x", "children": ["y"]},
     "session 'x' has forks; delete with force=True"),
    (errors.StoreNotEmpty, {"store": "s", "sessions": 2}, "session store 's' holds 2 sessions"),
    (errors.IdempotencyKeyReused, {"session_id": "x", "idempotency_key": "k"},
     "idempotency key 'k' was used with a different request"),
    (errors.SeqConflict, {"store": "s", "session_id": "x", "first_seq": 3},
     "session 'x' does not continue at seq 3"),
    (errors.ActiveRunExists, {"store": "s", "session_id": "x", "run_id": "r"},
     "session 'x' already has an active run 'r'"),
    (errors.LeaseHeld, {"run_id": "r", "owner": "w", "expires_at": _WHEN},
     "run 'r' is leased to 'w' until 2030-01-02 03:04:05+00:00"),
    (errors.StaleLease, {"run_id": "r", "fencing_token": 1, "current": 2},
     "run 'r' is held with fencing token 2, not 1"),
    (errors.StaleLease, {"run_id": "r", "fencing_token": 2, "current": 2},
     "run 'r' holds no lease"),
    (errors.RunClosed, {"run_id": "r", "status": "done"}, "run 'r' has ended (done)"),
    (errors.NotAwaiting, {"run_id": "r", "status": "running"},
     "run 'r' is not awaiting a human (running)"),
    (errors.AlreadyDecided, {"run_id": "r", "outcome": "approve"},
     "run 'r' has been decided already (approve)"),
]


@pytest.mark.parametrize(("cls", "ids", "message"), BUILT)
def test_errors_word_themselves_from_their_ids(cls: type[errors.OwnstateError],
                                               ids: dict[str, object], message: str) -> None:
    error = cls(**ids)
    assert (type(error), str(error), error.message, error.details) == (cls, message, message,
                                                                       ids)
    for name, value in ids.items():
        assert getattr(error, name) == value
    # a message given first wins, the ids stay
    assert (cls("because", **ids).message, cls("because", **ids).details) == ("because", ids)


def test_an_error_missing_an_id_of_its_wording_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'store'"):
        errors.SessionNotFound(session_id="x")
    with pytest.raises(TypeError, match="needs a message"):
        errors.InvalidInput(field="x")
    with pytest.raises(TypeError, match="needs a message"):
        errors.AlreadyExists(thread="t")


def _every_error() -> list[errors.OwnstateError]:
    made = [cls(**ids) for cls, ids, _ in BUILT]
    for name in errors.__all__:
        cls = getattr(errors, name)
        made.append(cls(f"a {name}", field="f", limit=3, actual=4))
    return made


@pytest.mark.parametrize("error", _every_error(), ids=lambda e: type(e).__name__)
def test_errors_survive_pickling(error: errors.OwnstateError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.message, back.details, back.code) == (
        type(error), error.message, error.details, error.code)


@pytest.mark.parametrize("error", [e for e in _every_error()
                                   if type(e) is not errors.OwnstateError],  # never raised
                         ids=lambda e: type(e).__name__)
def test_errors_survive_problem_json(error: errors.OwnstateError) -> None:
    """What the server sends is what its client raises: the class, the ids (as JSON) and,
    but for not-found errors (worded from their ids alone, see ``_wire``), the message."""
    problem = _wire.problem_for(error)
    status = problem["status"]
    assert isinstance(status, int)
    back = _wire.error_from_problem(status, problem)
    assert type(back) is type(error)
    assert back.details == {k: _wire._plain(v) for k, v in error.details.items()}
    if not isinstance(error, errors.NotFound):
        assert back.message == error.message
