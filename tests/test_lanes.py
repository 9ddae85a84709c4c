"""The suite's lanes: `caffetool test` runs pytest-xdist with the groups of tests/conftest.py.

A real pytest-xdist session in a folder of the test's own, with this suite's conftest: the modules of
one shared group run in one lane, and each lane keeps to a core of its own (the child is given every
core first, since this test may itself run in a lane kept to one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.tasks import TEST_LANES, lane_options

from . import conftest
from .conftest import PROJECT

REPORT = """
import json, os
from pathlib import Path

def test_where(request):
    record = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "cores": sorted(os.sched_getaffinity(0))}
    Path(request.config.rootpath / (Path(__file__).stem + ".json")).write_text(json.dumps(record))
"""


def test_every_module_that_starts_ray_docker_or_apt_is_in_its_shared_group():
    for path in sorted((PROJECT / "tests").glob("test_*.py")):
        text = path.read_text() if path.name != Path(__file__).name else ""
        if any(word in text for word in ('"sweep"', "ray start", "ray.init")):
            assert conftest.unit(path.name) == "ray", path.name
        if any(word in text for word in ("install_packages(", "debootstrap", "dockerd", "docker-context")):
            assert conftest.unit(path.name) == "system", path.name


def test_the_test_task_asks_for_lanes_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert lane_options([]) == ["-n", str(TEST_LANES), "--dist", "loadgroup"]
    for own in (["-n", "0"], ["-n4"], ["--numprocesses=3"], ["--dist", "load"], ["-p", "no:xdist"]):
        assert lane_options(["-x", *own]) == [], own
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    assert lane_options([]) == []  # one core: one lane


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="lanes of a core each need two cores")
def test_a_shared_group_runs_in_one_lane_and_each_lane_keeps_to_its_core(tmp_path):
    shutil.copy(Path(conftest.__file__), tmp_path / "conftest.py")
    ray_modules = conftest.SHARED["ray"]
    modules = [*ray_modules, "test_alpha", "test_beta", "test_gamma"]
    for module in modules:
        (tmp_path / f"{module}.py").write_text(REPORT)
    every_core = set(range(os.cpu_count() or 1))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "-q", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.sched_setaffinity(0, every_core))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = {module: json.loads((tmp_path / f"{module}.json").read_text()) for module in modules}
    assert len({records[module]["worker"] for module in ray_modules}) == 1, records
    cores = {record["worker"]: tuple(record["cores"]) for record in records.values()}
    assert set(cores) == {"gw0", "gw1"}, records  # the other modules went to the other lane
    assert len(set(cores.values())) == 2 and not set(cores["gw0"]) & set(cores["gw1"]), cores
