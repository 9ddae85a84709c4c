"""Docker: the Dockerfile lints clean, and the tasks send Docker exactly the right commands.

These machines have no Docker daemon and no GPU, so the docker tasks run against Invoke's
MockContext — a stand-in for `c.run` that records each command and answers with canned results.
It is the one place the suite uses a stand-in: what is checked is the exact argument list.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Config, MockContext, Result

from caffetool import dockerimg
from caffetool.config import TASK_DEFAULTS
from caffetool.errors import ConfigError
from caffetool.tasks import docker as docker_tasks

from .conftest import PROJECT


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run([hadolint, str(PROJECT / "docker" / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_runtime_lib_collector_is_valid_shell():
    assert subprocess.run(["bash", "-n", str(PROJECT / "docker" / "collect-runtime-libs.sh")]).returncode == 0


def context(runtimes: str = '{"nvidia":{},"runc":{}}', docker: bool = True, daemon: bool = True) -> MockContext:
    answers = {
        "command -v docker": Result("/usr/bin/docker\n" if docker else "", exited=0 if docker else 1),
        "docker info --format '{{json .Runtimes}}'": Result(runtimes + "\n", exited=0 if daemon else 1),
    }
    c = MockContext(config=Config(overrides=TASK_DEFAULTS), run=answers, repeat=True)
    c.set_result_for("run", re.compile(r"docker (build|run) .*"), Result(""))
    return c


def sent(c: MockContext) -> list[list[str]]:
    return [shlex.split(call.args[0]) for call in c.run.call_args_list if call.args[0].startswith("docker ")
            and not call.args[0].startswith("docker info")]


def test_gpu_build_command(tmp_path, engine):
    c = context()
    docker_tasks.build(c, variant="gpu", cuda="12.4.1", ubuntu="22.04")
    (argv,) = sent(c)
    source = dockerimg.source_context(None, None)
    assert argv == [
        "docker", "build", "--file", str(PROJECT / "docker" / "Dockerfile"),
        "--build-arg", "BUILD_IMAGE=nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
        "--build-arg", "RUNTIME_IMAGE=nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
        "--build-arg", "VARIANT=gpu", "--build-arg", "CUDA_ARCH=70 75 80 86 89 90",
        "--build-arg", "NCCL_VERSION=2.21.5-1+cuda12.4", "--build-context", f"caffe-source={source}",
        "--label", f"org.caffetool.engine.recipe={dockerimg.recipe_label()}",
        "--label", "org.caffetool.variant=gpu", "--tag", "caffetool:gpu-cuda12.4.1-ubuntu22.04", str(PROJECT)]
    assert sorted(p.name for p in source.iterdir()) == sorted(t.name for t in dockerimg.CAFFE_SOURCE.tarballs)


def test_cpu_build_with_tag_and_push(engine):
    c = context(runtimes='{"runc":{}}')  # a CPU image needs no nvidia runtime
    docker_tasks.build(c, variant="cpu", tag="me/caffetool:cpu", push=True)
    (argv,) = sent(c)
    assert argv[argv.index("--build-arg") + 1] == "BUILD_IMAGE=debian:12"
    assert "RUNTIME_IMAGE=debian:12-slim" in argv and "VARIANT=cpu" in argv and "NCCL_VERSION=" in argv
    assert argv[-4:] == ["--tag", "me/caffetool:cpu", "--push", str(PROJECT)]


def test_train_runs_as_the_user_with_gpus_and_mounts(tmp_path):
    c = context()
    docker_tasks.train(c, args="--gpu all --max-iter 500", data_dir=str(tmp_path / "d"), runs_dir=str(tmp_path / "r"))
    (argv,) = sent(c)
    assert argv == ["docker", "run", "--rm", "--init", "--user", f"{os.getuid()}:{os.getgid()}", "--env", "HOME=/tmp",
                    "--volume", f"{tmp_path / 'd'}:/opt/caffetool/data", "--volume", f"{tmp_path / 'r'}:/opt/caffetool/runs",
                    "--gpus", "all", "--shm-size", "1g", "caffetool:gpu-cuda12.4.1-ubuntu22.04",
                    "train", "--gpu", "all", "--max-iter", "500"]


def test_demo_publishes_on_loopback_only(tmp_path):
    c = context(runtimes='{"runc":{}}')
    docker_tasks.demo(c, variant="cpu", run="full-default", port=8080, data_dir=str(tmp_path), runs_dir=str(tmp_path))
    (argv,) = sent(c)
    assert argv[argv.index("--publish") + 1] == "127.0.0.1:8080:8000"
    assert "--gpus" not in argv
    assert argv[-8:] == ["caffetool:cpu-debian12", "demo.serve", "--host", "0.0.0.0", "--port", "8000",
                         "--run", "full-default"]


@pytest.mark.parametrize("ctx,message", [
    (dict(docker=False), "docker is not installed"),
    (dict(daemon=False), "the Docker daemon is not reachable"),
    (dict(runtimes='{"runc":{}}'), "Docker has no nvidia runtime: install the NVIDIA Container Toolkit"),
])
def test_missing_docker_pieces_are_explained_before_anything_runs(tmp_path, ctx, message):
    c = context(**ctx)
    with pytest.raises(Exception, match=message):
        docker_tasks.train.body(c, data_dir=str(tmp_path), runs_dir=str(tmp_path))
    assert sent(c) == []


def test_unknown_variant_or_cuda_is_refused():
    with pytest.raises(ConfigError, match="unknown --variant 'tpu'"):
        dockerimg.image("tpu")
    with pytest.raises(ConfigError, match=r"^unknown --cuda '11.8'; choose one of: 12.4.1, 12.6.3, 12.8.1 "
                                          r"\(NCCL is pinned per CUDA release\)$"):
        dockerimg.image("gpu", cuda="11.8")
    assert dockerimg.image("CPU").variant == "cpu"
