"""``caffetool docker.*``: build the images, train and serve the demo inside them.

Every Docker call goes through Invoke's ``c.run`` (which the tests replace with ``MockContext``,
there being no Docker daemon on the machines they run on).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from invoke import Collection, Context

from caffetool import dockerimg
from caffetool.choices import PORT, bounded, shell_words, writable_folder
from caffetool.errors import SystemDependencyError
from caffetool.tasks._common import pick, task

PROJECT = Path(__file__).resolve().parents[2]
IMAGE_HELP = {"variant": "gpu or cpu", "cuda": f"CUDA release: {', '.join(dockerimg.NCCL_FOR_CUDA)}",
              "ubuntu": f"Ubuntu release of the GPU image: {', '.join(dockerimg.UBUNTU)}", "tag": "image tag"}


def require_docker(c: Context, gpu: bool) -> None:
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


def _run(c: Context, argv: list[str]) -> None:
    """Run a Docker command, echoed, its output passed through."""
    c.run(shlex.join(argv), pty=False, echo=True)


@task(help={**IMAGE_HELP, "push": "push the image after building", "source": "folder or URL with the tarballs"})
def build(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          push: bool = False, source: str | None = None) -> None:
    """Build the gpu or cpu image with the engine recipe (docker/Dockerfile)."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    require_docker(c, gpu=False)  # building needs no GPU
    context = dockerimg.source_context(pick(source, c.engine.source), c.engine.debian_mirror)
    _run(c, dockerimg.build_argv(img, PROJECT, context, push))


def _paths(c: Context, data_dir: str | None, runs_dir: str | None) -> tuple[Path, Path]:
    """The host folders to mount, checked (they are made once Docker is known to be there)."""
    data = writable_folder(pick(data_dir, c.data.dir), "--data-dir", "data.dir")
    runs = writable_folder(pick(runs_dir, c.runs.dir), "--runs-dir", "runs.dir")
    return data, runs


def _made(*folders: Path) -> None:
    """Make the mounted folders, so Docker does not create them owned by root."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)


@task(help={**IMAGE_HELP, "args": "arguments for `caffetool train` inside the image, e.g. \"--gpu all --max-iter 500\"",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)"})
def train(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          args: str = "", data_dir: str | None = None, runs_dir: str | None = None) -> None:
    """Train inside the image (`--gpus all`), data and runs mounted, files owned by you."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    words = shell_words(args, "--args")
    data, runs = _paths(c, data_dir, runs_dir)
    require_docker(c, img.gpu)
    _made(data, runs)
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, ["train", *words]))


@task(help={**IMAGE_HELP, "run": "run to serve", "port": "host port, 1 to 65535 (published on 127.0.0.1 only)",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)"})
def demo(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
         run: str | None = None, port: str = "8000", data_dir: str | None = None,
         runs_dir: str | None = None) -> None:
    """Serve the demo from the image on http://127.0.0.1:PORT/."""
    img = dockerimg.image(variant, cuda, ubuntu, tag)
    host_port = bounded(port, "--port", PORT)
    data, runs = _paths(c, data_dir, runs_dir)
    require_docker(c, img.gpu)
    _made(data, runs)
    serve = ["demo.serve", "--host", "0.0.0.0", "--port", "8000"] + (["--run", run] if run else [])
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, serve, publish=f"127.0.0.1:{host_port}:8000"))


ns = Collection("docker", build, train, demo)
