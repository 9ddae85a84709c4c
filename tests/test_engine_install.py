"""An interrupted build leaves nothing that looks installed (real build, interrupted mid-way)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from caffetool import config

from .conftest import PROJECT
from .processes import stop

SCRIPT = """
import sys
from caffetool.engine.install import install
install(prefix=sys.argv[1], source_location=sys.argv[2], progress=False)
"""


def started(folder) -> bool:
    """A staging folder under ``folder`` holds build files (Ninja's or make's): its compile has begun."""
    return any(any(folder.glob(f".engine.staging-*/build/{name}")) for name in ("build.ninja", "Makefile"))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_build_leaves_no_prefix_and_no_staging(tmp_path, engine, sig):
    prefix = tmp_path / "engine"
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT if sig == signal.SIGINT else SCRIPT_TERM,
         str(prefix), str(config.cache_home() / "sources")],
        cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        # Wait until compilation has started inside the staging folder (Ninja's build files, or make's).
        while time.monotonic() < deadline and not started(tmp_path):
            assert child.poll() is None, child.stdout.read()
            time.sleep(0.2)
        assert started(tmp_path), "compilation never started"
        time.sleep(2)
        child.send_signal(sig)
        child.wait(timeout=60)
    finally:
        stop(child, grace=0)
    assert child.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# SIGTERM goes through the task layer's handler, as it does for `caffetool engine.install`.
SCRIPT_TERM = """
import signal, sys
from caffetool.tasks._common import _interrupt
signal.signal(signal.SIGTERM, _interrupt)
from caffetool.engine.install import install
install(prefix=sys.argv[1], source_location=sys.argv[2], progress=False)
"""
