"""Released migrations are append-only: each one's SQL is pinned here by its digest.

A database records only the versions applied to it, so a released migration whose SQL
changed would leave databases migrated before and after the change with different
schemas under the same version. Changing a schema means appending a migration; once it is
released, pin it below. A digest that no longer matches means a released migration was
edited: undo that and append a new migration instead.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ownstate.backends.postgres import schema as postgres_schema
from ownstate.backends.sqlite import schema as sqlite_schema

RELEASED = {
    "sqlite": {
        1: "5c1ccfca0e7d007967001898a74f02dc81abb3620e37f30eac773aa81e11a711",
        2: "d848e105d7e85f07b74d4dca34ac4ce0f02508930e6a58914941af32514c1008",
        3: "be74d4bd520cf1ca5433c8b05b5fe055e5c71e9dd5888be3844adac306949309",
        4: "16d233cf8e4d68cd5fe433a9c6eb7bfd934c01b93e7ed85818f3eec95c60a40c",
        5: "0bf759a2d68764e54f1478b771c796bd4ea313f87293efb54f0b0c924c562316",
        6: "5b2b8c8f6f59dd886167f42eb56a3662355ecdb0c713dfaa67a018a021c2eb8f",
        7: "0f14f560a37324f5be84e4131d37c2825a7c93f3f2d1ef699876c4aa5877c86f",
        8: "453d4e5255bfebefbfda004b857a07beef5469e8f025a082f2f6295d508c9bc1",
        9: "4cace36bc6e23480104d0da83a1c52380a59a4add6a15b718f5ee7fc24d988b1",
    },
    "postgres": {
        1: "31c25f0bec00f4f93e7f646372a6c28947aa085fe1057242963c3d4d7611137f",
        2: "47cd1aaf8d5dba787061bc16ed1f37bba28d784de4d77dfe4941ff9b2928f1b5",
        3: "e7bda58b5d41a22a9646db2571300acc83886946ac912b3c3acdb2c376ea122b",
        4: "7f396d45bd5582321a2ebbc78a663ce30f2bd7d9b984ae79a67a966cfa7aeede",
        5: "f0673e5c7782faaeee5d746abd8697f256c3ccce385591e4ba4201a067a838da",
        6: "875acb2e293ea14a117b7e49c54e105fe594e49be7591b7e2302028216830e0c",
        7: "c32a45a2997a2b84f174f04ee37165b1094a1694cd59ca2e6c6ce0c31e4c7513",
        8: "9995cd82764a2d201f4e4045e199484db731a6a4c7e4ec5d589f80c246e5fbef",
        9: "5f1c34a538365e61fe357fa5872687fca4f308b875e89b62472384613acc88ec",
        10: "722843e12dbc5aa2ee1655c6b4570a34f12cd5c2721d5064bb1137557af6bb9d",
    },
}
SCHEMAS: dict[str, Any] = {"sqlite": sqlite_schema, "postgres": postgres_schema}


def digest(migration: Any) -> str:
    """The SHA-256 of a migration's version, description and statements, exactly."""
    text = json.dumps([migration.version, migration.description, list(migration.statements)])
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("backend", sorted(RELEASED))
def test_released_migrations_are_unchanged(backend: str) -> None:
    migrations = SCHEMAS[backend].MIGRATIONS
    versions = [m.version for m in migrations]
    # increasing from 1; a number may be left free for a migration made alongside
    assert versions[0] == 1
    assert versions == sorted(set(versions))
    by_version = {m.version: m for m in migrations}
    released = RELEASED[backend]
    assert set(released) <= set(by_version), "a released migration was removed"
    for version, pinned in released.items():
        assert digest(by_version[version]) == pinned, (
            f"released {backend} migration {version} was edited; append a new one instead")
    assert migrations[-1].version == SCHEMAS[backend].SCHEMA_VERSION

