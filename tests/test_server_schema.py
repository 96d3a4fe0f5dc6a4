"""The OpenAPI document against the server itself, with schemathesis.

Every operation gets generated requests, valid and invalid ones alike, with an admin key:
no answer may be a 5xx, every answer must match the document (status, media type, body
schema), and a request that breaks the document must be refused with a 4xx.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

import ownstate
from ownstate.server import create_app

_DATABASE = f"memory://schemathesis-{uuid.uuid4().hex}"
with ownstate.connect(_DATABASE, tenant="fuzz") as _direct:
    _, TOKEN = _direct.api_keys.create("fuzzer", admin=True)
    _direct.session_stores.create("fuzz-store")
    _direct.memory_stores.create("fuzz-memory")

APP = create_app(_DATABASE)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=int(os.environ.get("OWNSTATE_FUZZ_EXAMPLES", "30")),
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
