"""The ServerApp that ``flwr run .`` loads (``[tool.flwr.app.components]`` in ``pyproject.toml``).

``strategies.server_app`` is the transport layer and imports nothing above
it; this module composes its ServerApp with what this layer adds: the full
results folder (``result.json``, CSVs, plot: ``simulations.report``) and
the per-round progress bar.  The ClientApp needs neither, so Flower loads
it from ``strategies.client_app:app`` directly.
"""

from __future__ import annotations

from strategies.server_app import make_server_app

from .progress import RoundProgress
from .report import write_run_outputs

app = make_server_app(write_outputs=write_run_outputs, progress=RoundProgress)
