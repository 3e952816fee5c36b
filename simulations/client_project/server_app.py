"""The ServerApp: fedhh's, reading this app's own files (``pyproject.toml`` names it).

fedhh is installed where the SuperLink runs; this module travels in the app
bundle with ``client_app.py``, so Flower loads it from the folder it
installed the bundle in, and a relative ``population.path`` in the run
config names a file of this bundle (``population.jsonl``), wherever the
project's folder is.  Flower bundles ``.py``, ``.toml``, ``.md``, ``.json``,
``.jsonl``, ``.yaml`` and ``.yml`` files only: a file the run needs travels
as one of these, or is named by an absolute path.
"""

from pathlib import Path

from simulations.flower_app import bundled_app

app = bundled_app(Path(__file__).resolve().parent)
