"""``caffetool ray.start`` and ``ray.stop``: a Ray kept running between sweeps (``sweep --address auto``)."""

from __future__ import annotations

from typing import Any

from invoke import Collection

from caffetool import extras
from caffetool.sweep import resident
from caffetool.tasks._common import task


@task(help={"cpus": "CPUs Ray may give trials (default: all of this machine's)",
            "gpus": "GPUs Ray may give trials (default: those it finds)"})
def start(c: Any, cpus: str | None = None, gpus: str | None = None) -> None:
    """Start a Ray on this machine for sweeps to attach to (--address auto): its start-up paid once."""
    extras.need("sweep", "caffetool ray.start")
    resident.start(cpus, gpus)


@task
def stop(c: Any) -> None:
    """Stop the Ray that `ray.start` started (it alone: other Rays on this machine go on)."""
    extras.need("sweep", "caffetool ray.stop")  # where Ray is missing, no `ray.start` can have run
    resident.stop()


ns = Collection("ray", start, stop)
