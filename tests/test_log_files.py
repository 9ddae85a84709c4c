"""No glog files left behind: every Caffe caffetool starts logs to stderr, where it is read.

glog writes ``<program>.<host>.<user>.log.<LEVEL>.<time>.<pid>`` files (and ``<program>.<LEVEL>``
links) into ``$TMPDIR``, else ``/tmp``, unless told to log to stderr. The commands run here get a
private ``TMPDIR`` and none of the caller's ``GLOG_*`` settings, so any file glog writes shows up.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from .conftest import PROJECT

GLOG_FILE = re.compile(r"\.(INFO|WARNING|ERROR|FATAL)(\.\d{8}-\d{6}\.\d+)?$")


def bare_env(tmp: Path) -> dict[str, str]:
    tmp.mkdir(exist_ok=True)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GLOG_")}, "TMPDIR": str(tmp)}


def glog_files(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.rglob("*") if GLOG_FILE.search(p.name))


def invoke(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=PROJECT, env=bare_env(tmp),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-1500:]
    return done


def test_a_caffe_run_without_the_settings_would_be_seen(engine, tmp_path):
    """The check below can see glog files: a plain Caffe that aborts leaves them in TMPDIR."""
    tmp = tmp_path / "tmp"
    subprocess.run([str(engine.caffe), "device_query", "-gpu", "0"], env=bare_env(tmp), capture_output=True)
    assert "caffe.FATAL" in glog_files(tmp)


@pytest.mark.engine
def test_typical_commands_leave_no_glog_files(fashion_data, tmp_path):
    tmp, runs = tmp_path / "tmp", tmp_path / "runs"
    data = str(fashion_data.path.parent)
    invoke(tmp, "engine.check")
    invoke(tmp, "train", "--data-dir", data, "--runs-dir", str(runs), "--name", "quiet", "--max-iter", "20",
           "--test-interval", "20", "--test-iter", "2")
    invoke(tmp, "train.test", "quiet", "--runs-dir", str(runs))
    invoke(tmp, "train.time", "--iterations", "1")
    image = tmp_path / "shirt.png"
    cv2.imwrite(str(image), np.full((28, 28), 200, np.uint8))
    invoke(tmp, "demo.classify", str(image), "--run", "quiet", "--runs-dir", str(runs))
    assert glog_files(tmp) == []


@pytest.mark.engine
def test_the_suites_own_calls_of_caffe_tools_leave_no_glog_files(tmp_path):
    """Tests that compare with Caffe's own converters run them as caffetool does (glog to stderr)."""
    tmp = tmp_path / "tmp"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_convert.py",
                           "tests/test_fetch.py", "-k", "caffe or compute_image_mean"],
                          cwd=PROJECT, env=bare_env(tmp), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    assert glog_files(tmp) == []
