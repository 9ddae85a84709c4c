"""What a training shows while it runs: a tqdm bar where stderr is a terminal, and elsewhere (CI,
``nohup``, a log file), where a bar is not drawn at all, a plain line on stdout every
:data:`LINE_EVERY` of the run.

Both show the same figures (:func:`figures`): the train loss, and for each test net its accuracy
when it has one, else every output it has, whatever the net calls them (an autoencoder's
``cross_entropy_loss`` and ``l2_error``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Protocol

from caffetool.runs.logparse import Metrics, outputs

LINE_EVERY = 0.05


class Progress(Protocol):
    def show(self, m: Metrics) -> None: ...

    def close(self) -> None: ...


def figures(m: Metrics) -> list[tuple[str, float]]:
    """The figures a progress display shows, labelled: ``loss`` (the output named so, else Caffe's
    weighted sum of the losses), then ``test accuracy`` (``test#k ...`` when there are several test
    nets); a test net without an accuracy shows each of its outputs."""
    out = []
    if (loss := m.train_loss()) is not None:
        out.append(("loss", loss))
    for net, rows in sorted(m.test.items()):
        label = "test" if len(m.test) == 1 else f"test#{net}"
        names = outputs(rows)
        for name in [n for n in names if n == "accuracy"] or names:
            if (value := m.latest(name, net)) is not None:
                out.append((f"{label} {name}", value))
    return out


def display(total: int, done: int) -> Progress:
    """A bar where stderr is a terminal, progress lines on stdout elsewhere."""
    return _Bar(total) if sys.stderr.isatty() else ProgressLines(total, done)


class _Bar:
    def __init__(self, total: int) -> None:
        from tqdm import tqdm  # noqa: PLC0415

        self.bar = tqdm(total=total, unit="it", desc="caffe train", dynamic_ncols=True)

    def show(self, m: Metrics) -> None:
        if m.iteration > self.bar.n:
            self.bar.update(m.iteration - self.bar.n)
        post = {label: f"{value:.4f}" for label, value in figures(m)}
        if m.train and m.train[-1].get("LearningRate") is not None:
            post["lr"] = f"{m.train[-1]['LearningRate']:.2e}"
        if post:
            self.bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        self.bar.close()


class ProgressLines:
    """A line each time the run passes another ``every`` of ``total`` iterations, flushed at once:
    ``iteration 500/10000 (5%): loss 0.4321, test accuracy 0.8123, 46.1 it/s, ETA 03:26``.

    The rate counts from the first iteration this process saw (tests included, so the ETA holds);
    a resumed run starts counting where it resumed.
    """

    def __init__(self, total: int, done: int = 0, every: float = LINE_EVERY, out: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(total, 1)
        self.step = max(1, round(self.total * every))
        self.next = (done // self.step + 1) * self.step
        self.out = out
        self.clock = clock
        self.first: tuple[int, float] | None = None

    def show(self, m: Metrics) -> None:
        now = self.clock()
        if self.first is None and m.train:
            self.first = (m.iteration, now)
        if m.iteration < self.next or self.first is None:
            return
        self.next = (m.iteration // self.step + 1) * self.step
        print(self.line(m, now), file=self.out or sys.stdout, flush=True)

    def line(self, m: Metrics, now: float) -> str:
        head = f"iteration {m.iteration}/{self.total} ({m.iteration / self.total:.0%})"
        details = [f"{label} {value:.4f}" for label, value in figures(m)]
        assert self.first is not None
        iterations, seconds = m.iteration - self.first[0], now - self.first[1]
        if iterations > 0 and seconds > 0:
            rate = iterations / seconds
            details.append(f"{rate:.1f} it/s, ETA {_interval(max(0, self.total - m.iteration) / rate)}")
        return head + (": " + ", ".join(details) if details else "")

    def close(self) -> None:
        pass


def _interval(seconds: float) -> str:
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm.format_interval(seconds)
