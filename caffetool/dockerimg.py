"""Docker images of caffetool: which image, built how, run how — as argument lists.

The commands are built here as data and run by the task layer; the image recipes are in
``docker/``. GPU images (``docker/Dockerfile``) compile the engine in an
``nvidia/cuda:<cuda>-cudnn-devel-ubuntu<ubuntu>`` build stage, copy it to the matching
``-cudnn-runtime`` final stage and pin NCCL to the release NVIDIA's CUDA repository pairs with that
CUDA. The CPU image (``docker/bundle.Dockerfile``) is Debian 12 with the host's installed engine
unpacked from an engine bundle: no compiler in the build, a minute instead of a source build's ten.
The GPU image ``--base pypi`` is the same recipe with a CUDA engine's bundle: Debian 12 plus the
NVIDIA wheels from PyPI that the bundle declares (CUDA 13 runtime, cuBLAS, cuRAND, cuDNN 9, NCCL),
so it builds where no NVIDIA registry is reachable; the NVIDIA container runtime adds the driver.

Neither recipe uses BuildKit-only features (named build contexts, cache mounts): what a build needs
from outside the project is staged in ``build/docker-context/`` inside the build context, so the
legacy builder of a Docker without buildx (Debian's and Ubuntu's ``docker.io``) builds them too.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from caffetool import config
from caffetool.checksum import sha256_file
from caffetool.choices import choose
from caffetool.engine import cudalibs, cudnnlibs, source
from caffetool.engine.fatbin import Architectures
from caffetool.engine.locate import locate
from caffetool.engine.recipe import CAFFE_SOURCE, PATCH_DIR, PROJECT_PATCHES
from caffetool.errors import ConfigError

if TYPE_CHECKING:
    from caffetool.engine.bundles import BundleResult

# The architectures each CUDA release's nvcc compiles for (`nvcc --list-gpu-code`), from Volta's 7.0 up:
# the default rule of caffetool.engine.cudaarch, declared per release because the image's engine is
# labelled with it before it is built. The build checks each against the image's own nvcc and its
# libcaffe against the list, so a wrong row fails the build instead of shipping.
ARCH_FOR_CUDA: dict[str, str] = {
    "12.4.1": "70 72 75 80 86 87 89 90",
    "12.6.3": "70 72 75 80 86 87 89 90",
    "12.8.1": "70 72 75 80 86 87 89 90 100 101 120",
}
# The image label naming the device code the image's engine carries ({"sm": [...], "ptx": [...]}).
DEVICE_CODE_LABEL = "org.caffetool.engine.device_code"
# NCCL builds in NVIDIA's CUDA apt repository, per CUDA release (libnccl2 / libnccl-dev versions).
NCCL_FOR_CUDA: dict[str, str] = {
    "12.4.1": "2.21.5-1+cuda12.4",
    "12.6.3": "2.23.4-1+cuda12.6",
    "12.8.1": "2.25.1-1+cuda12.8",
}
UBUNTU = ("22.04", "24.04")
VARIANTS = ("gpu", "cpu")
# Where a GPU image's CUDA comes from: NVIDIA's nvidia/cuda images, or Debian 12 and PyPI's wheels.
BASES = ("nvidia", "pypi")
CPU_IMAGES = ("debian:12", "debian:12-slim")
CONTAINER_PROJECT = "/opt/caffetool"
CONTAINER_ENGINE = "/opt/caffe"
# Staged inputs of a build, inside the build context (.dockerignore lets this folder of build/ through).
STAGE = Path("build") / "docker-context"
DOCKERFILES = {"source": Path("docker") / "Dockerfile", "bundle": Path("docker") / "bundle.Dockerfile"}
# The files of an installed engine whose libraries `docker.check` resolves inside an image.
ENGINE_ELVES = ("bin/caffe", "lib/libcaffe.so")
BUNDLE_NAME = "engine.tar.zst"
# The bundle only travels from the host to the daemon: fast compression beats a smaller archive.
BUNDLE_LEVEL = 3
# Where Debian and Ubuntu keep locally added certificate authorities (update-ca-certificates(8)).
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
BUILDKIT = "BuildKit (docker buildx)"
LEGACY = "the legacy builder (no buildx: DOCKER_BUILDKIT=0)"


@dataclass(frozen=True)
class Image:
    variant: str
    cuda: str
    ubuntu: str
    tag: str
    base: str = "nvidia"

    @property
    def gpu(self) -> bool:
        """Whether the image is the CUDA one."""
        return self.variant == "gpu"

    @property
    def bundled(self) -> bool:
        """Whether the image unpacks the host's engine bundle (cpu, gpu from PyPI) or compiles one."""
        return not self.gpu or self.base == "pypi"

    @property
    def dockerfile(self) -> Path:
        return DOCKERFILES["bundle" if self.bundled else "source"]


def image(variant: str, cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None,
          base: str = "nvidia") -> Image:
    """The image a variant names; the nvidia/cuda one pairs a CUDA release with an Ubuntu release.

    The PyPI-based GPU image takes its CUDA release from the engine bundle, so ``--cuda`` and
    ``--ubuntu`` do not apply to it.
    """
    variant = choose(variant, VARIANTS, "--variant")
    base = choose(base, BASES, "--base")
    if variant == "cpu":
        return Image(variant, cuda, ubuntu, tag or "caffetool:cpu-debian12", "debian")
    if base == "pypi":
        return Image(variant, "pypi", "-", tag or "caffetool:gpu-pypi-debian12", base)
    cuda = choose(cuda, NCCL_FOR_CUDA, "--cuda", also="NCCL is pinned per CUDA release")
    ubuntu = choose(ubuntu, UBUNTU, "--ubuntu")
    return Image(variant, cuda, ubuntu, tag or f"caffetool:gpu-cuda{cuda}-ubuntu{ubuntu}", base)


def recipe_label() -> str:
    """The engine recipe as JSON, recorded on the image (its full build manifest is inside)."""
    return json.dumps({
        "source": CAFFE_SOURCE.version,
        "tarballs": {t.name: t.sha256 for t in CAFFE_SOURCE.tarballs},
        "patches": {name: sha256_file(PATCH_DIR / name) for name in PROJECT_PATCHES},
    }, sort_keys=True, separators=(",", ":"))


def stage_source(project: Path, location: str | None, mirror: str | None) -> Path:
    """Stage exactly the two verified tarballs in the build context, for the GPU image's source build."""
    cache = config.cache_home() / "sources"
    source.obtain(CAFFE_SOURCE, cache, location, mirror)
    folder = project / STAGE / "source"
    folder.mkdir(parents=True, exist_ok=True)
    names = {t.name for t in CAFFE_SOURCE.tarballs}
    for stale in folder.iterdir():
        if stale.name not in names:
            stale.unlink()
    for tarball in CAFFE_SOURCE.tarballs:
        if not (folder / tarball.name).exists() or sha256_file(folder / tarball.name) != tarball.sha256:
            shutil.copyfile(cache / tarball.name, folder / tarball.name)
    return folder


def stage_bundle(project: Path, img: Image, prefix: str | Path | None,
                 say: Callable[[str], None] = print) -> BundleResult:
    """Bundle the host's installed engine into the build context, for a bundled image.

    The engine must suit the image: a CPU-only one for the cpu image, a CUDA one for the GPU image
    from PyPI (checked before the minute of bundling).
    """
    from caffetool.engine import bundles  # noqa: PLC0415  (the bundler pulls in the ELF tools)

    engine = locate(prefix, probe=False)
    if img.gpu and engine.cpu_only:
        raise ConfigError(f"the engine at {engine.prefix} is CPU-only, and the gpu image from PyPI needs a CUDA "
                          "one: build it with `caffetool engine.compile-check` (no GPU needed) and pass "
                          "--prefix, or use --variant cpu")
    if not img.gpu and not engine.cpu_only:
        raise ConfigError(f"the engine at {engine.prefix} is a CUDA build; the cpu image needs a CPU-only one: "
                          "pass --prefix with a CPU engine, or use --variant gpu --base pypi")
    folder = project / STAGE / "engine"
    folder.mkdir(parents=True, exist_ok=True)
    return bundles.make(prefix, folder / BUNDLE_NAME, BUNDLE_LEVEL, say=say)


def stage_certificates(project: Path, local: Path = LOCAL_CAS) -> list[str]:
    """Stage the host's local certificate authorities for the build stages' apt and pip.

    Where a TLS-inspecting proxy stands between the build and PyPI, pip inside the image trusts
    only what the image does; these (and only these) are added, to the build stage alone.
    """
    folder = project / STAGE / "ca-certificates"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    names = []
    for cert in sorted(local.rglob("*.crt")) if local.is_dir() else []:
        name = cert.relative_to(local).as_posix().replace("/", "-")
        shutil.copyfile(cert, folder / name)
        names.append(name)
    return names


def build_argv(img: Image, project: Path, network: str | None = None,
               device_code: Architectures | None = None) -> list[str]:
    """``docker build`` of ``img`` from its Dockerfile, with the project (and its staged inputs) as context.

    Only flags the legacy builder shares with BuildKit: pushing is a separate ``docker push``.
    ``device_code``: what the bundled engine carries (a GPU image from a bundle); a GPU image that
    compiles its engine carries its CUDA release's :data:`ARCH_FOR_CUDA`. Either is put on the image
    as :data:`DEVICE_CODE_LABEL` for :func:`labelled_device_code`.
    """
    if not img.bundled:
        base = f"nvidia/cuda:{img.cuda}-cudnn"
        args = {"BUILD_IMAGE": f"{base}-devel-ubuntu{img.ubuntu}", "RUNTIME_IMAGE": f"{base}-runtime-ubuntu{img.ubuntu}",
                "VARIANT": img.variant, "CUDA_ARCH": ARCH_FOR_CUDA[img.cuda], "NCCL_VERSION": NCCL_FOR_CUDA[img.cuda]}
    elif img.gpu:  # the NVIDIA container runtime mounts the driver into containers that ask for it
        args = {"BASE_IMAGE": CPU_IMAGES[0], "NVIDIA_VISIBLE_DEVICES": "all"}
    else:
        args = {"BASE_IMAGE": CPU_IMAGES[0]}
    argv = ["docker", "build", "--file", str(project / img.dockerfile)]
    for name, value in args.items():
        argv += ["--build-arg", f"{name}={value}"]
    if network:
        argv += ["--network", network]
    if img.gpu and not img.bundled:
        arch = tuple(ARCH_FOR_CUDA[img.cuda].split())
        device_code = Architectures(arch, arch[-1:])
    if device_code is not None:
        argv += ["--label", f"{DEVICE_CODE_LABEL}={json.dumps(device_code.as_dict(), separators=(',', ':'))}"]
    argv += ["--label", f"org.caffetool.engine.recipe={recipe_label()}",
             "--label", f"org.caffetool.variant={img.variant}", "--label", f"org.caffetool.base={img.base}",
             "--tag", img.tag]
    return argv + [str(project)]


def labels_argv(img: Image) -> list[str]:
    """``docker image inspect`` printing the image's labels as JSON."""
    return ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", img.tag]


def labelled_device_code(labels_json: str) -> Architectures | None:
    """The device code an image's labels name, or None (an image built before images named it)."""
    try:
        labels = json.loads(labels_json) or {}
        code = json.loads(labels[DEVICE_CODE_LABEL])
        return Architectures(tuple(map(str, code["sm"])), tuple(map(str, code["ptx"])))
    except (ValueError, KeyError, TypeError):
        return None


def push_argv(img: Image) -> list[str]:
    """``docker push`` of a built image (``docker build --push`` exists only with buildx)."""
    return ["docker", "push", img.tag]


def probe_argv(img: Image, program: str, *args: str) -> list[str]:
    """``docker run`` of one program of the image in place of its entry point, with no network."""
    return ["docker", "run", "--rm", "--network", "none", "--entrypoint", program, img.tag, *args]


def unresolved(ldd_output: str) -> list[str]:
    """The libraries ``ldd`` could not find, but the NVIDIA driver's (the container runtime mounts those)."""
    missing = []
    for line in ldd_output.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where.strip() == "not found" and name not in cudalibs.DRIVER_SONAMES:
            missing.append(name)
    return sorted(set(missing))


def cudnn_folder(ldd_output: str) -> tuple[str, int] | None:
    """Where ``ldd`` of the engine found ``libcudnn.so.N`` inside the image, and N; None without cuDNN."""
    for line in ldd_output.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libcudnn.so.") and where.strip() and where.strip() != "not found":
            return str(PurePosixPath(where.split(" (", 1)[0].strip()).parent), int(name.rsplit(".", 1)[1])
    return None


def cudnn_listing_argv(img: Image, folder: str, major: int) -> list[str]:
    """``ldd`` of every ``libcudnn*.so.N`` in ``folder`` inside the image, each after a ``== NAME`` line."""
    script = f'for f in "$1"/libcudnn*.so.{major}; do echo "== ${{f##*/}}"; ldd "$f"; done'
    return probe_argv(img, "sh", "-c", script, "sh", folder)


def cudnn_check(folder: str, major: int, listing: str) -> cudnnlibs.CudnnCheck:
    """:func:`cudnn_listing_argv`'s output as the check :mod:`caffetool.engine.cudnnlibs` makes on a host."""
    files: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            files[current] = []
        elif current is not None:
            files[current].append(line)
    present = tuple(sorted(name for name in files if "*" not in name))
    return cudnnlibs.CudnnCheck(
        Path(folder), present, tuple(n for n in cudnnlibs.SUBLIBRARIES.get(major, ()) if n not in present),
        {name: tuple(missing) for name in present if (missing := unresolved("\n".join(files[name])))})


def run_argv(img: Image, uid: int, gid: int, data_dir: Path, runs_dir: Path, task: list[str],
             publish: str | None = None, network: str | None = None) -> list[str]:
    """``docker run`` for a task inside the image, as the calling user, data and runs mounted."""
    argv = ["docker", "run", "--rm", "--init", "--user", f"{uid}:{gid}", "--env", "HOME=/tmp",
            "--volume", f"{data_dir}:{CONTAINER_PROJECT}/data", "--volume", f"{runs_dir}:{CONTAINER_PROJECT}/runs"]
    if network:
        argv += ["--network", network]
    if img.gpu:
        argv += ["--gpus", "all", "--shm-size", "1g"]
    if publish:
        argv += ["--publish", publish]
    return argv + [img.tag, *task]
