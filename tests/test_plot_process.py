"""The plot process: the same file as a drawing in this process, errors raised here, never left running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from simulations.plot_process import draw, plots_aside
from simulations.report import plot_discovery

RESULT = {
    "protocol": "triehh",
    "n_users": 1000,
    "heavy_hitters": [{"item": item, "support": support} for item, support in (("the", 90), ("of", 40), ("a", 7))],
    "privacy": {"epsilon": 4.0, "delta": 1e-6},
}


def fail(path: Path) -> None:
    raise ValueError(f"cannot draw {path.name}")


def record_pid(path: Path) -> None:
    path.write_text(str(os.getpid()), encoding="utf-8")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_plot_process_draws_the_same_file_as_this_process(tmp_path: Path) -> None:
    with plots_aside() as process:
        assert process is not None and process.alive
        draw(record_pid, tmp_path / "pid")
        draw(plot_discovery, RESULT, tmp_path / "aside.png")
    assert int((tmp_path / "pid").read_text(encoding="utf-8")) == process.pid != os.getpid()
    draw(record_pid, tmp_path / "pid")  # outside the block: drawn here
    assert int((tmp_path / "pid").read_text(encoding="utf-8")) == os.getpid()
    plot_discovery(RESULT, tmp_path / "here.png")
    assert (tmp_path / "aside.png").read_bytes() == (tmp_path / "here.png").read_bytes()
    assert process.pid is not None and gone(process.pid)


def test_an_error_in_the_plot_process_is_raised_here_and_the_process_still_ends(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="ValueError: cannot draw x.png"), plots_aside() as process:
        draw(fail, tmp_path / "x.png")
    assert process is not None and process.pid is not None and gone(process.pid)
    assert not (tmp_path / "x.png").exists()


def test_a_plot_process_that_died_leaves_the_drawing_to_this_process(tmp_path: Path) -> None:
    with plots_aside() as process:
        assert process is not None and process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        draw(record_pid, tmp_path / "pid")
    assert int((tmp_path / "pid").read_text(encoding="utf-8")) == os.getpid()


def test_a_block_inside_another_draws_in_the_enclosing_process_and_leaves_it_running(tmp_path: Path) -> None:
    with plots_aside() as outer:
        with plots_aside() as inner:
            assert inner is outer
        assert outer is not None and outer.alive  # the inner block's end did not close it
        draw(record_pid, tmp_path / "pid")
        assert int((tmp_path / "pid").read_text(encoding="utf-8")) == outer.pid
    assert outer.pid is not None and gone(outer.pid)


def test_unlabelled_minor_ticks_become_grid_lines_and_labelled_ones_stay() -> None:
    """The discovery plot's minor grid (:func:`simulations.report.minor_grid`): on an axis over more
    than a decade, lines at 2..9 x each power of ten within the limits, which stay as the data gave."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    from simulations.report import minor_grid

    axes = Figure().add_subplot()
    axes.loglog([1, 500], [20, 80])  # x over 2.7 decades, y over 0.6
    limits = (axes.get_xlim(), axes.get_ylim())
    minor_grid(axes, alpha=0.25)
    assert (axes.get_xlim(), axes.get_ylim()) == limits
    (lines,) = [c for c in axes.collections if isinstance(c, LineCollection)]
    low, high = limits[0]
    expected = [m * 10.0**e for e in range(-1, 4) for m in range(2, 10) if low <= m * 10.0**e <= high]
    assert [segment[0, 0] for segment in lines.get_segments()] == pytest.approx(expected)
    assert isinstance(axes.xaxis.get_minor_locator(), NullLocator)
    assert not isinstance(axes.yaxis.get_minor_locator(), NullLocator)  # its minor ticks carry labels
    minor_ticks = axes.yaxis.get_minor_ticks()
    assert minor_ticks and all(tick.gridline.get_visible() for tick in minor_ticks)
