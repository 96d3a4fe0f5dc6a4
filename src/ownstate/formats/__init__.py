"""Message formats: what the shape of an item's ``data`` says about it.

It may touch only :mod:`.derive`, whose names it re-exports; each converter is a module of
its own.
"""

from .derive import DerivedColumns, derive_columns, infer_format

__all__ = ["DerivedColumns", "derive_columns", "infer_format"]
