"""Ports not yet built on PostgreSQL: every call raises NotImplementedError."""

from __future__ import annotations

from typing import Any

from ._core import PostgresCore

__all__ = ["AssetsInPostgres", "CheckpointsInPostgres", "FactsInPostgres", "RunsInPostgres"]


class FactsInPostgres(PostgresCore):
    async def create_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_memory_stores(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_memory_store(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def remember(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def recall(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def history(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_fact(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def explain(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def forget(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def subject_facts(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def erase_subject(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError



class RunsInPostgres(PostgresCore):
    async def open_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_runs(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def mark_awaiting(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def resume(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def close_run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def outstanding(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def record_effect(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_effect(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError



class CheckpointsInPostgres(PostgresCore):
    async def put_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def put_writes(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_run_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_session_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def copy_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def apply_retention(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def checkpoint_usage(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError



class AssetsInPostgres(PostgresCore):
    async def put_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def get_asset_ref(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def list_assets(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def delete_asset(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
