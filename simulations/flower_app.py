"""The ServerApp that ``flwr run .`` loads (``[tool.flwr.app.components]`` in ``pyproject.toml``).

``strategies.server_app`` is the transport layer and imports nothing above
it; this module composes its ServerApp with what this layer adds: the full
results folder (``result.json``, CSVs, plot: ``simulations.report``) and
the per-round progress bar.  The ClientApp needs neither, so Flower loads
it from ``strategies.client_app:app`` directly.

An app bundle of its own (``fedhh new-client``) names :func:`bundled_app`
of its folder, from a module of the bundle, as its ServerApp: its relative
``population.path`` is then a file of the bundle, found wherever Flower
installed it, so the project runs from whatever folder it was moved to.
"""

from __future__ import annotations

from pathlib import Path

from flwr.serverapp import ServerApp

from strategies.server_app import make_server_app

from .progress import RoundProgress
from .report import write_run_outputs

app = make_server_app(write_outputs=write_run_outputs, progress=RoundProgress)


def bundled_app(app_dir: Path) -> ServerApp:
    """fedhh's ServerApp for the app bundle installed in ``app_dir`` (the folder of the bundle's module
    that calls this): a relative ``population.path`` names a file of the bundle."""
    return make_server_app(write_outputs=write_run_outputs, progress=RoundProgress, app_dir=app_dir)
