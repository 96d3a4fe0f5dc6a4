"""Message formats: what the shape of an item's ``data`` says about it."""

from .derive import DerivedColumns, derive_columns, infer_format

__all__ = ["DerivedColumns", "derive_columns", "infer_format"]
