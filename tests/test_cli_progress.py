"""Progress of long commands on stderr: a rich bar on a terminal; in a pipe or a log, a plain
line at most every LOG_EVERY_S seconds."""

from __future__ import annotations

import io
import re

from ringccl.cli import progress
from ringccl.cli.app import main
from ringccl.cli.progress import Progress


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_log_gets_a_line_at_most_every_interval_and_none_for_a_short_run():
    out, clock = io.StringIO(), _Clock()
    with Progress(stream=out, every=10, clock=clock, terminal=False) as shown:
        task = shown.task("searching layouts", total=1317)
        for done in range(1, 6):          # 4 s: nothing yet
            clock.now += 1
            task.update(completed=done)
        assert out.getvalue() == ""
        clock.now += 5                    # 10 s after the start
        task.update(completed=120, last="tp 8 pp 4")
        clock.now += 5                    # 5 s after that line: none
        task.update(advance=1)
        clock.now += 5
        task.update(advance=1, total=1400)
    assert out.getvalue().splitlines() == [
        "searching layouts: 120/1,317 (9%), 10 s, tp 8 pp 4",
        "searching layouts: 122/1,400 (8%), 20 s, tp 8 pp 4"]


def test_a_task_without_a_total_counts_and_disabled_progress_prints_nothing():
    out, clock = io.StringIO(), _Clock()
    with Progress(stream=out, every=0, clock=clock, terminal=False) as shown:
        shown.task("training (ddp)").update(advance=3)
    assert out.getvalue() == "training (ddp): 3, 0 s\n"
    out = io.StringIO()
    with Progress(False, stream=out, every=0, clock=clock, terminal=False) as shown:
        shown.task("x", total=2).update(completed=1)
    assert out.getvalue() == ""


def test_a_terminal_gets_the_bar_and_no_lines():
    out = io.StringIO()
    shown = Progress(stream=out, every=0, terminal=True)
    # under pytest stderr is captured, so rich finds no terminal and the lines take over
    assert shown.bar is None
    shown.task("x", total=2).update(completed=1)
    assert out.getvalue().startswith("x: 1/2 (50%), ")


def test_plan_search_in_a_pipe_shows_its_progress_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search",
                 "--gpus", "16"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines and all(line.startswith("searching layouts: ") for line in lines)
    counts = [re.match(r"searching layouts: ([\d,]+)/([\d,]+) \((\d+)%\), \d+ s$", line)
              for line in lines]
    assert all(counts)
    done = [int(m[1].replace(",", "")) for m in counts]
    assert done == sorted(done) and done[-1] == int(counts[-1][2].replace(",", ""))
    assert counts[-1][3] == "100" and all(m[3] != "100" for m in counts[:-1])
    assert "searching layouts" not in captured.out
    # --json keeps stderr for errors only
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search",
                 "--gpus", "16", "--json"]) == 0
    assert capsys.readouterr().err == ""

