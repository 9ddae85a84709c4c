"""``invoke docker.*``: build the images, train and serve the demo inside them.

Every Docker call goes through Invoke's ``c.run`` (which the tests replace with ``MockContext``,
there being no Docker daemon on the machines they run on).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from invoke import Collection

from caffetool import dockerimg
from caffetool.errors import SystemDependencyError
from caffetool.tasks._common import pick, task

PROJECT = Path(__file__).resolve().parents[2]
IMAGE_HELP = {"variant": "gpu or cpu", "cuda": f"CUDA release: {', '.join(dockerimg.NCCL_FOR_CUDA)}",
              "ubuntu": f"Ubuntu release of the GPU image: {', '.join(dockerimg.UBUNTU)}", "tag": "image tag"}


def require_docker(c, gpu: bool) -> None:
    """Docker (client and a reachable daemon) and, for GPU images, the NVIDIA container toolkit."""
    if c.run("command -v docker", hide=True, warn=True).failed:
        raise SystemDependencyError("docker is not installed; see https://docs.docker.com/engine/install/")
    info = c.run("docker info --format '{{json .Runtimes}}'", hide=True, warn=True)
    if info.failed:
        raise SystemDependencyError("the Docker daemon is not reachable (`docker info` failed); start it, or "
                                    "add your user to the docker group")
    if gpu and "nvidia" not in info.stdout:
        raise SystemDependencyError("Docker has no nvidia runtime: install the NVIDIA Container Toolkit "
                                    "(nvidia-ctk runtime configure --runtime=docker) and restart Docker")


def _run(c, argv: list[str]) -> None:
    c.run(shlex.join(argv), pty=False, echo=True)


@task(help={**IMAGE_HELP, "push": "push the image after building", "source": "folder or URL with the tarballs"})
def build(c, variant="gpu", cuda="12.4.1", ubuntu="22.04", tag=None, push=False, source=None):
    """Build the gpu or cpu image with the engine recipe (docker/Dockerfile)."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    require_docker(c, gpu=False)  # building needs no GPU
    context = dockerimg.source_context(pick(source, c.engine.source), c.engine.debian_mirror)
    _run(c, dockerimg.build_argv(img, PROJECT, context, push))


def _paths(c, data_dir, runs_dir) -> tuple[Path, Path]:
    data = Path(pick(data_dir, c.data.dir)).absolute()
    runs = Path(pick(runs_dir, c.runs.dir)).absolute()
    data.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    return data, runs


@task(help={**IMAGE_HELP, "args": "arguments for `invoke train` inside the image, e.g. \"--gpu all --max-iter 500\"",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)"})
def train(c, variant="gpu", cuda="12.4.1", ubuntu="22.04", tag=None, args="", data_dir=None, runs_dir=None):
    """Train inside the image (`--gpus all`), data and runs mounted, files owned by you."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    require_docker(c, img.gpu)
    data, runs = _paths(c, data_dir, runs_dir)
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, ["train", *shlex.split(args)]))


@task(help={**IMAGE_HELP, "run": "run to serve", "port": "host port (published on 127.0.0.1 only)",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)"})
def demo(c, variant="gpu", cuda="12.4.1", ubuntu="22.04", tag=None, run=None, port=8000, data_dir=None,
         runs_dir=None):
    """Serve the demo from the image on http://127.0.0.1:PORT/."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    require_docker(c, img.gpu)
    data, runs = _paths(c, data_dir, runs_dir)
    serve = ["demo.serve", "--host", "0.0.0.0", "--port", "8000"] + (["--run", run] if run else [])
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, serve, publish=f"127.0.0.1:{port}:8000"))


ns = Collection("docker", build, train, demo)
