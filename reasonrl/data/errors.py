"""Names every data module shares, below all of them (``sources`` dispatches to ``hub`` and ``gym_source``, which
raise the same error): the error of malformed data and the data-file suffixes."""

from __future__ import annotations

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class DataFormatError(ValueError):
    """A data source, file or row is malformed or ambiguous; the message names the source, file and line/row."""
