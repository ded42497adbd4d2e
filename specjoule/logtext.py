"""A log as text, plain or gzipped.

The pipeline writes plain ``.log`` files; committed evidence keeps each one as ``<name>.log.gz``
(``tools/slim_evidence.py``, ADR 0212). A reader names a log either way and gets the same text.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import TextIO

GZ = ".gz"


def log_path(path: str | os.PathLike[str]) -> Path:
    """The file that holds the log ``path`` names: itself if it exists, else its gzipped (or plain) twin."""
    p = Path(path)
    if p.exists():
        return p
    twin = p.with_name(p.name[: -len(GZ)]) if p.name.endswith(GZ) else p.with_name(p.name + GZ)
    if twin.exists():
        return twin
    raise FileNotFoundError(f"{p}: no such log (nor {twin.name})")


def open_log(path: str | os.PathLike[str], errors: str = "replace") -> TextIO:
    """The log's text stream, decompressed when the file is gzipped."""
    p = log_path(path)
    if p.name.endswith(GZ):
        return gzip.open(p, "rt", errors=errors)
    return open(p, errors=errors)


def read_log(path: str | os.PathLike[str], errors: str = "replace") -> str:
    with open_log(path, errors=errors) as fh:
        return fh.read()
