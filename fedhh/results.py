"""Writing a run's results so that a failed run leaves nothing behind.

Files are written into a hidden temporary folder beside the destination and
moved into place with one rename at the end, so a reader sees either the
complete results folder or none.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _finite(value: Any) -> Any:
    """JSON has no infinity: write it as the string "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(_finite(document), indent=2, ensure_ascii=False, default=_json_default)


def write_result(
    output_dir: str | Path,
    result: dict[str, Any],
    extra_writers: list[Callable[[Path], None]] | None = None,
) -> Path:
    """Write ``result.json`` (and anything ``extra_writers`` add) atomically."""
    destination = Path(output_dir)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        (staging / "result.json").write_text(to_json(result) + "\n", encoding="utf-8")
        for writer in extra_writers or []:
            writer(staging)
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination / "result.json"
