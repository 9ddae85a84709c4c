"""The CPU image built and run for real, with Debian's own Docker (docker.io, no buildx).

The test starts a private Docker daemon under the test's tmp folder (``benchmarks/private_docker.py``),
stops it at the end whatever happens, and drives it through the docker tasks: build the image (the
legacy builder, the host's engine bundled in), train 100 iterations inside it with the host's data
and runs folders mounted, check the files are the caller's, then serve the demo.
No registry is reachable, so ``debian:12`` is made with debootstrap and ``docker import`` there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from invoke import Config, Context

from benchmarks import private_docker
from caffetool import dockerimg
from caffetool.tasks import docker
from caffetool.tasks.settings import TASK_DEFAULTS

from .processes import stop

pytestmark = [pytest.mark.slow, pytest.mark.engine, pytest.mark.timeout(1500)]

RUN = "docker100"
CORE_VENV_MB = 900


def _context() -> Context:
    """The tasks' configuration; stdin is not passed on (pytest captures it)."""
    return Context(Config(overrides={**TASK_DEFAULTS, "run": {**TASK_DEFAULTS.get("run", {}), "in_stream": False}}))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The environment that points Debian's docker client at a private daemon, stopped afterwards."""
    if os.geteuid() != 0:
        pytest.skip("starting a Docker daemon needs root")
    home = tmp_path_factory.mktemp("dockerd")
    with private_docker.daemon(home) as env:
        private_docker.debian_image(env, dockerimg.CPU_IMAGES[0], home)
        yield env


@pytest.fixture(scope="module")
def image(daemon) -> str:
    """The CPU image, built once by ``docker.build`` with the legacy builder."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("DOCKER_HOST", "PATH"):
            patch.setenv(name, daemon[name])
        docker.build(_context(), variant="cpu", network="host")
    return dockerimg.image("cpu").tag


@pytest.fixture
def docker_env(daemon, monkeypatch):
    for name in ("DOCKER_HOST", "PATH"):
        monkeypatch.setenv(name, daemon[name])


def test_the_client_is_debians_without_buildx(docker_env):
    version = subprocess.run(["docker", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
    assert version.stdout.startswith("20.10."), version.stdout + version.stderr
    assert subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0


def test_cpu_image_trains_with_host_folders_and_serves_the_demo(image, docker_env, fashion_data, tmp_path):
    data, runs = fashion_data.path.parent, tmp_path / "runs"
    labels = subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
                            capture_output=True, text=True, check=True).stdout
    assert dockerimg.recipe_label().replace('"', '\\"') in labels and '"org.caffetool.variant":"cpu"' in labels
    size = int(subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", image],
                              capture_output=True, text=True, check=True).stdout)
    parts = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "du", image, "-sm",
                            "/opt/venv", "/opt/caffe", "/usr"], capture_output=True, text=True, check=True).stdout
    print(f"the CPU image: {size / 1e6:.0f} MB; MB in: {' '.join(parts.split())}")
    venv_mb = int(parts.split()[0])
    assert venv_mb <= CORE_VENV_MB  # caffetool's core, as tests/test_extras.py bounds a fresh venv of it

    c = _context()
    docker.train(c, variant="cpu", network="none", data_dir=str(data), runs_dir=str(runs),
                       args=f"--dataset fashion-mnist --gpu cpu --name {RUN} --max-iter 100 --test-interval 100")
    run_dir = runs / RUN
    written = [p for p in run_dir.rglob("*")]
    assert any(p.suffix == ".caffemodel" and "iter_100" in p.name for p in written), sorted(map(str, written))
    assert {p.stat().st_uid for p in [run_dir, *written]} == {os.getuid()}
    assert {p.stat().st_gid for p in [run_dir, *written]} == {os.getgid()}

    drawn = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c",
                            "python /opt/caffe/python/draw_net.py "
                            "/opt/caffe/share/caffe/examples/mnist/lenet_train_test.prototxt /tmp/lenet.png "
                            "&& test -s /tmp/lenet.png"], capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr[-1500:]  # BVLC's draw_net.py, with the image's Graphviz

    port = _free_port()
    demo = subprocess.Popen([str(Path(sys.executable).parent / "caffetool"), "docker.demo", "--variant", "cpu",
                             "--network", "host", "--port", str(port), "--run", RUN, "--data-dir", str(data),
                             "--runs-dir", str(runs)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        private_docker.wait("the demo", lambda: _healthz(port) is not None or demo.poll() is not None, 180)
        health = _healthz(port)
        assert health is not None, demo.stdout.read() if demo.poll() is not None else ""
        assert '"status":"ok"' in health.replace(" ", "")
    finally:
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"ancestor={image}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "kill", *ids], capture_output=True)
        stop(demo, grace=30)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthz(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def test_gpu_image_from_pypi_links_its_engine(docker_env, capsys):
    """Debian 12 and NVIDIA's PyPI wheels around the compile-checked CUDA engine: every library the
    engine loads resolves inside the image, and ``caffe --version`` runs (no GPU here to go further)."""
    from caffetool.engine.compile_check import check_prefix
    from caffetool.engine.locate import MANIFEST

    if not (check_prefix() / MANIFEST).is_file():
        pytest.skip("no CUDA engine at engine.compile-check's prefix (its build takes 10 minutes on 2 cores)")
    docker.build(_context(), variant="gpu", base="pypi", network="host")
    capsys.readouterr()
    docker.check(_context(), variant="gpu", base="pypi")
    out = capsys.readouterr().out
    assert "caffetool:gpu-pypi-debian12: bin/caffe and lib/libcaffe.so resolve all" in out
    assert "caffe --version: caffe version 1.0.0" in out
    labels = subprocess.run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}",
                             dockerimg.image("gpu", base="pypi").tag], capture_output=True, text=True, check=True).stdout
    assert '"org.caffetool.base":"pypi"' in labels and '"org.caffetool.variant":"gpu"' in labels
