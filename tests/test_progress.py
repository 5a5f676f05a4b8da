"""Progress bars in logs: plain lines at most every LOG_SECONDS where the output is not a terminal."""

import io

from tqdm import tqdm

import spacy_elmo.progress as progress
from spacy_elmo.training.loop.run_state import RunState
from spacy_elmo.training.pretrain import _progress_figures


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_log_gets_a_line_every_log_seconds_not_a_redraw_per_update(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    monkeypatch.setattr(progress, "LOG_SECONDS", 10.0)
    log = io.StringIO()
    bar = progress.progress_bar(total=100, desc="steps", unit="step", file=log)
    for step in range(100):
        clock.now += 1.0
        bar.update(1)
        bar.set_postfix(loss=f"{step:.1f}")  # asks for a redraw every step, as pretraining does
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and all(line.startswith("steps:") for line in lines)
    assert 10 <= len(lines) <= 12, lines  # one per 10 s of the 100 s, the first and the last
    assert "100/100" in lines[-1] and "loss=99.0" in lines[-1]


def test_a_short_bar_that_clears_itself_still_logs_where_it_ended(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    log = io.StringIO()
    with progress.progress_bar(total=3072, unit="B", desc="weights.hdf5", leave=False, file=log) as bar:
        for _ in range(3):  # a local copy: done well within LOG_SECONDS
            bar.update(1024)
    lines = log.getvalue().splitlines()
    assert "0%" in lines[0] and "100%" in lines[-1], lines


def test_a_log_says_where_a_bar_ended_once(monkeypatch):
    """An update past LOG_SECONDS already printed the end (a block of lines done at 21 s): closing
    adds no second copy of that line; a bar whose end was not printed yet gets it on closing."""
    clock = FakeClock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    for last_update_at, lines_at_the_end in ((21.0, 1), (3.0, 1)):
        clock.now = 0.0
        log = io.StringIO()
        with progress.progress_bar(total=300, unit="line", desc="Embedding", file=log) as bar:
            bar.update(150)
            clock.now = last_update_at
            bar.update(150)
            bar.refresh()  # as tqdm's update does once its own interval passed
        lines = log.getvalue().splitlines()
        assert sum("300/300" in line for line in lines) == lines_at_the_end, lines
        assert "300/300" in lines[-1] and "0/300" in lines[0], lines


def test_a_terminal_gets_tqdms_own_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    bar = progress.progress_bar(total=3, file=Terminal())
    assert type(bar) is tqdm
    bar.close()


def test_the_bar_shows_no_dev_perplexity_before_the_first_evaluation():
    record = {"tokens_per_s": 1234.0, "loss": 5.4321}
    assert _progress_figures(record, RunState()) == {"tok_s": "1,234", "loss": "5.432"}
    assert _progress_figures(record, RunState(best_dev=321.04))["best_dev_ppl"] == "321.0"
