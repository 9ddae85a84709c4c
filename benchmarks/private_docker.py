"""A private Docker daemon and a ``debian:12`` image made on this machine, for the tests and the
benchmarks that need real containers.

The daemon has its own data root, exec root and socket under one folder, no bridge network (a
machine without Docker's networking set up needs none; containers use ``--network host`` or
``none``) and the storage driver dockerd picks (overlay2 where the kernel and file system allow it,
vfs elsewhere); it is stopped and its folders removed on leaving, whatever happened. No registry is
reachable here, so ``debian:12`` is made with debootstrap (minbase, from the Debian mirror apt uses)
and ``docker import``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from caffetool import apt  # noqa: E402
from tests.processes import stop  # noqa: E402

DEBIAN_DOCKER = Path("/usr/bin/docker")  # docker.io's client; another Docker may come first on PATH


def wait(what: str, ready: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {seconds:.0f} s")
        time.sleep(0.5)


@contextlib.contextmanager
def daemon(home: Path) -> Iterator[dict[str, str]]:
    """The environment that points Debian's docker client at a daemon of its own under ``home``."""
    if os.geteuid() != 0:
        raise PermissionError("starting a Docker daemon needs root")
    apt.install_packages(["docker.io", "debootstrap"])
    socket = home / "docker.sock"
    client_bin = home / "bin"
    client_bin.mkdir(parents=True, exist_ok=True)
    if not (client_bin / "docker").exists():
        (client_bin / "docker").symlink_to(DEBIAN_DOCKER)
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}", "PATH": f"{client_bin}:{os.environ['PATH']}"}
    with open(home / "dockerd.log", "w") as log:
        dockerd = subprocess.Popen(
            ["dockerd", "--data-root", str(home / "root"), "--exec-root", str(home / "exec"),
             "--pidfile", str(home / "dockerd.pid"), "--host", f"unix://{socket}", "--bridge=none",
             "--iptables=false", "--ip6tables=false"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            wait("dockerd", lambda: subprocess.run(["docker", "info"], env=env, capture_output=True).returncode == 0
                 or dockerd.poll() is not None, 60)
            if dockerd.poll() is not None:
                raise RuntimeError((home / "dockerd.log").read_text()[-2000:])
            yield env
        finally:
            stop(dockerd, grace=60)
            # dockerd leaves its default network namespace mounted under the exec root
            for point in _mounts_under(home):
                subprocess.run(["umount", "-l", point], check=False)
            for folder in ("root", "exec"):  # what the storage driver keeps of every layer
                shutil.rmtree(home / folder, ignore_errors=True)


def debian_image(env: dict[str, str], tag: str, scratch: Path) -> None:
    """``tag``: Debian 12 minbase, as debootstrap makes it from the mirror apt uses here."""
    rootfs = scratch / "rootfs"
    mirror = apt.system_debian_mirror() or "http://deb.debian.org/debian"
    done = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), mirror],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-1000:] + done.stderr[-1000:])
    try:
        subprocess.run(f"tar -C {rootfs} -c . | docker import - {tag}", shell=True, env=env, check=True,
                       capture_output=True)
    finally:
        shutil.rmtree(rootfs)


def _mounts_under(folder: Path) -> list[str]:
    """Mount points below ``folder``, deepest first."""
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(f"{folder}/")), key=len, reverse=True)
