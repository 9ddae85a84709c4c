"""``caffetool docker.*``: build the images, train and serve the demo inside them.

Every Docker call goes through Invoke's ``c.run``: tests/test_docker.py checks the exact commands
with Invoke's ``MockContext``, tests/test_docker_daemon.py runs them against a real daemon.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from invoke import Collection, Context

from caffetool import dockerimg
from caffetool.choices import PORT, bounded, shell_words
from caffetool.engine import cudaarch
from caffetool.engine.fatbin import Architectures
from caffetool.errors import EngineError, SystemDependencyError
from caffetool.tasks._common import chosen_folder, pick, task

PROJECT = Path(__file__).resolve().parents[2]
IMAGE_HELP = {"variant": "gpu or cpu", "cuda": f"CUDA release: {', '.join(dockerimg.NCCL_FOR_CUDA)}",
              "ubuntu": f"Ubuntu release of the GPU image: {', '.join(dockerimg.UBUNTU)}", "tag": "image tag",
              "base": "where the gpu image's CUDA comes from: nvidia (nvidia/cuda images) or pypi (debian:12 "
                      "and NVIDIA's PyPI wheels, from a CUDA engine's bundle)"}


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


def _run(c: Context, argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a Docker command, echoed, its output passed through."""
    c.run(shlex.join(argv), pty=False, echo=True, env=env or {})


def builder(c: Context) -> tuple[str, dict[str, str]]:
    """BuildKit where the buildx plugin is there, else the legacy builder (asked for explicitly)."""
    if c.run("docker buildx version", hide=True, warn=True).ok:
        return dockerimg.BUILDKIT, {}
    return dockerimg.LEGACY, {"DOCKER_BUILDKIT": "0"}


def _bundled_prefix(c: Context, img: dockerimg.Image, prefix: str | None) -> str | Path | None:
    """The engine to bundle: --prefix, else the CPU engine (cpu) or the compile-checked CUDA one (gpu, pypi)."""
    if prefix or not img.gpu:
        return pick(prefix, c.engine.prefix)
    from caffetool.engine.compile_check import check_prefix  # noqa: PLC0415

    return check_prefix()


@task(help={**IMAGE_HELP, "push": "push the image after building", "source": "folder or URL with the tarballs (gpu)",
            "prefix": "installed engine to bundle (default: engine.prefix for cpu, engine.compile-check's "
                      "CUDA engine for --base pypi)",
            "network": "network for the build's apt and pip (e.g. host, where the daemon has no bridge)"})
def build(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          push: bool = False, source: str | None = None, prefix: str | None = None,
          network: str | None = None, base: str = "nvidia") -> None:
    """Build an image: gpu (engine compiled in an nvidia/cuda build stage) or, from the host's engine
    bundled, cpu or gpu --base pypi."""
    img = dockerimg.image(variant, cuda, ubuntu, tag, base)
    require_docker(c, gpu=False)  # building needs no GPU
    device_code = None
    if img.bundled:
        r = dockerimg.stage_bundle(PROJECT, img, _bundled_prefix(c, img, prefix), say=lambda _: None)
        cuda_note = f", CUDA {r.cuda['major']} from PyPI: {' '.join(r.cuda['requirements'])}" if r.cuda else ""
        print(f"staged the engine bundle {r.path} ({r.size / 2**20:.1f} MiB, {r.seconds:.0f} s{cuda_note})")
        if r.cuda and r.cuda.get("arch"):
            device_code = Architectures(tuple(r.cuda["arch"]), tuple(r.cuda["arch"][-1:]))
    else:
        staged = dockerimg.stage_source(PROJECT, pick(source, c.engine.source), c.engine.debian_mirror)
        print(f"staged the Caffe source tarballs in {staged}")
    if cas := dockerimg.stage_certificates(PROJECT):
        print(f"the build stage trusts this machine's local certificate authorities: {', '.join(cas)}")
    name, env = builder(c)
    print(f"building {img.tag} with {name}")
    started = time.monotonic()
    _run(c, dockerimg.build_argv(img, PROJECT, network, device_code), env)
    print(f"built {img.tag} in {time.monotonic() - started:.0f} s with {name}")
    if push:
        _run(c, dockerimg.push_argv(img))


@task(help=IMAGE_HELP)
def check(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          base: str = "nvidia") -> None:
    """Check a built image's engine without a GPU: every library resolves (ldd), `caffe --version` runs."""
    img = dockerimg.image(variant, cuda, ubuntu, tag, base)
    require_docker(c, gpu=False)
    elves = [f"{dockerimg.CONTAINER_ENGINE}/{name}" for name in dockerimg.ENGINE_ELVES]
    ldd = c.run(shlex.join(dockerimg.probe_argv(img, "ldd", *elves)), hide=True, warn=True)
    if ldd.failed:
        raise EngineError(f"ldd of {' '.join(elves)} failed inside {img.tag}: {ldd.stderr.strip() or ldd.stdout.strip()}")
    if missing := dockerimg.unresolved(ldd.stdout):
        raise EngineError(f"inside {img.tag} the engine cannot find {', '.join(missing)}; rebuild the image")
    libraries = {line.split()[0] for line in ldd.stdout.splitlines() if " => " in line}
    print(f"{img.tag}: {' and '.join(dockerimg.ENGINE_ELVES)} resolve all {len(libraries)} libraries they load "
          "(ldd; the NVIDIA driver's come from the container runtime)")
    if found := dockerimg.cudnn_folder(ldd.stdout):
        listing = c.run(shlex.join(dockerimg.cudnn_listing_argv(img, *found)), hide=True, warn=True)
        checked = dockerimg.cudnn_check(*found, listing.stdout)
        if listing.failed or not checked.ok:
            raise EngineError(f"inside {img.tag}, cuDNN {found[1]} would fail at its first convolution on a GPU "
                              f"(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED): {checked.summary()}; rebuild the image")
        print(f"{img.tag}: cuDNN {checked.summary()}")
    version = c.run(shlex.join(dockerimg.probe_argv(img, f"{dockerimg.CONTAINER_ENGINE}/bin/caffe", "--version")),
                    hide=True, warn=True)
    if version.failed:
        raise EngineError(f"`caffe --version` failed inside {img.tag}: {version.stderr.strip()[-400:]}")
    print(f"{img.tag}: caffe --version: {version.stdout.strip()}")


def cards_run(c: Context, img: dockerimg.Image) -> None:
    """Refuse, before a GPU container starts, where a visible GPU gets no kernel from the image's
    engine (its device-code label against NVML's compute capabilities); an image without the label
    is left to Caffe's own error."""
    labels = c.run(shlex.join(dockerimg.labels_argv(img)), hide=True, warn=True)
    code = dockerimg.labelled_device_code(labels.stdout) if labels.ok else None
    cards = cudaarch.nvml_cards() if code is not None else None
    if not cards:
        return
    newest = list(dockerimg.NCCL_FOR_CUDA)[-1]
    fix = f"`caffetool docker.build --variant gpu --cuda {newest}` (or --base pypi from an engine built for it)"
    for note in cudaarch.check_card(code, list(range(len(cards))), f"the image {img.tag}", fix, cards=lambda: cards):
        print(f"note: {note}")


def _paths(c: Context, data_dir: str | None, runs_dir: str | None) -> tuple[Path, Path]:
    """The host folders to mount, checked (they are made once Docker is known to be there)."""
    data = chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir")
    runs = chosen_folder(runs_dir, c.runs.dir, "--runs-dir", "runs.dir")
    return data, runs


def _made(*folders: Path) -> None:
    """Make the mounted folders, so Docker does not create them owned by root."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)


@task(help={**IMAGE_HELP, "args": "arguments for `caffetool train` inside the image, e.g. \"--gpu all --max-iter 500\"",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)",
            "network": "container network (e.g. none, where the daemon has no bridge)"})
def train(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          args: str = "", data_dir: str | None = None, runs_dir: str | None = None,
          network: str | None = None, base: str = "nvidia") -> None:
    """Train inside the image (`--gpus all`), data and runs mounted, files owned by you."""
    img = dockerimg.image(variant, cuda, ubuntu, tag, base)
    words = shell_words(args, "--args")
    data, runs = _paths(c, data_dir, runs_dir)
    require_docker(c, img.gpu)
    if img.gpu:
        cards_run(c, img)
    _made(data, runs)
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, ["train", *words], network=network))


@task(help={**IMAGE_HELP, "run": "run to serve", "port": "host port, 1 to 65535 (published on 127.0.0.1 only)",
            "data_dir": "host data folder (mounted)", "runs_dir": "host runs folder (mounted)",
            "network": "container network; with host the demo listens on the host's 127.0.0.1:PORT itself"})
def demo(c: Context, variant: str = "gpu", cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
         run: str | None = None, port: str = "8000", data_dir: str | None = None,
         runs_dir: str | None = None, network: str | None = None, base: str = "nvidia") -> None:
    """Serve the demo from the image on http://127.0.0.1:PORT/."""
    img = dockerimg.image(variant, cuda, ubuntu, tag, base)
    host_port = bounded(port, "--port", PORT)
    data, runs = _paths(c, data_dir, runs_dir)
    require_docker(c, img.gpu)
    if img.gpu:
        cards_run(c, img)
    _made(data, runs)
    chosen = ["--run", run] if run else []
    if network == "host":  # the host's own network: no port to publish, so listen on its loopback only
        serve = ["demo.serve", "--host", "127.0.0.1", "--port", str(host_port), *chosen]
        _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, serve, network=network))
        return
    serve = ["demo.serve", "--host", "0.0.0.0", "--port", "8000", *chosen]
    _run(c, dockerimg.run_argv(img, os.getuid(), os.getgid(), data, runs, serve, publish=f"127.0.0.1:{host_port}:8000",
                               network=network))


ns = Collection("docker", build, check, train, demo)
