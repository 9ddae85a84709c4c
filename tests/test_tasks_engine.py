"""The engine tasks as a user runs them: real `invoke` processes in the project directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from caffetool.engine import mkl
from caffetool.engine.recipe import CAFFE_SOURCE, DEFAULT_BLAS, BuildOptions

from .conftest import PROJECT


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=PROJECT, capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=600,
    )


def test_info_json_reports_mode_sha256_and_patches(engine):
    done = invoke("engine.info", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cpu_only"] is True
    assert report["prefix"] == str(engine.prefix)
    assert report["pycaffe"] is True
    assert report["gpus"] == []
    assert report["manifest"]["source"]["tarballs"][0]["sha256"] == CAFFE_SOURCE.orig.sha256
    assert [p["name"] for p in report["manifest"]["patches"]][-1] == BuildOptions().patches[-1]


def test_missing_engine_is_one_clear_error(tmp_path):
    done = invoke("engine.info", "--prefix", str(tmp_path / "none"))
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: no Caffe engine at {tmp_path / 'none'} — run `caffetool engine.install`"
    assert "Traceback" not in done.stderr


def test_caffe_root_and_invoke_config_choose_the_prefix(tmp_path):
    done = invoke("engine.info", env={"CAFFE_ROOT": str(tmp_path / "root")})
    assert f"no Caffe engine at {tmp_path / 'root'}" in done.stderr
    done = invoke("engine.info", env={"CAFFE_ROOT": str(tmp_path / "root"),
                                      "INVOKE_ENGINE_PREFIX": str(tmp_path / "conf")})
    assert f"no Caffe engine at {tmp_path / 'conf'}" in done.stderr
    done = invoke("engine.info", "--prefix", str(tmp_path / "flag"),
                  env={"INVOKE_ENGINE_PREFIX": str(tmp_path / "conf")})
    assert f"no Caffe engine at {tmp_path / 'flag'}" in done.stderr


def test_check_trains_a_tiny_net_with_the_real_binary(engine):
    done = invoke("engine.check", "--iterations", "40")
    assert done.returncode == 0, done.stderr
    first, last = (float(x) for x in done.stdout.split("loss ")[1].split(" -> "))
    assert "caffe train: 40 iterations" in done.stdout
    assert last < first / 2


def test_info_names_the_blas_and_the_layers(engine):
    done = invoke("engine.info")
    assert done.returncode == 0, done.stderr
    blas = f"mkl {mkl.VERSION}" if DEFAULT_BLAS == "mkl" else DEFAULT_BLAS
    assert f"mode        CPU only, BLAS {blas}, OpenMP layers\n" in done.stdout
