"""Docker images of caffetool: which image, built how, run how — as argument lists.

The commands are built here as data and run by the task layer; the image recipe itself is
``docker/Dockerfile``. GPU images pair an ``nvidia/cuda:<cuda>-cudnn-devel-ubuntu<ubuntu>`` build
stage with the matching ``-cudnn-runtime`` final stage and pin NCCL to the release NVIDIA's CUDA
repository pairs with that CUDA; the CPU image is Debian 12.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from caffetool import config
from caffetool.engine import source
from caffetool.engine.recipe import CAFFE_SOURCE, PATCH_DIR, PROJECT_PATCHES
from caffetool.checksum import sha256_file
from caffetool.choices import choose

GPU_ARCH = "70 75 80 86 89 90"  # Volta to Hopper; PTX for 90 lets newer GPUs JIT-compile
# NCCL builds in NVIDIA's CUDA apt repository, per CUDA release (libnccl2 / libnccl-dev versions).
NCCL_FOR_CUDA: dict[str, str] = {
    "12.4.1": "2.21.5-1+cuda12.4",
    "12.6.3": "2.23.4-1+cuda12.6",
    "12.8.1": "2.25.1-1+cuda12.8",
}
UBUNTU = ("22.04", "24.04")
VARIANTS = ("gpu", "cpu")
CPU_IMAGES = ("debian:12", "debian:12-slim")
CONTAINER_PROJECT = "/opt/caffetool"


@dataclass(frozen=True)
class Image:
    variant: str
    cuda: str
    ubuntu: str
    tag: str

    @property
    def gpu(self) -> bool:
        """Whether the image is the CUDA one."""
        return self.variant == "gpu"


def image(variant: str, cuda: str = "12.4.1", ubuntu: str = "22.04", tag: str | None = None) -> Image:
    """The image a variant names; the GPU one pairs a CUDA release with an Ubuntu release."""
    variant = choose(variant, VARIANTS, "--variant")
    if variant == "gpu":
        cuda = choose(cuda, NCCL_FOR_CUDA, "--cuda", also="NCCL is pinned per CUDA release")
        ubuntu = choose(ubuntu, UBUNTU, "--ubuntu")
    default = f"caffetool:gpu-cuda{cuda}-ubuntu{ubuntu}" if variant == "gpu" else "caffetool:cpu-debian12"
    return Image(variant, cuda, ubuntu, tag or default)


def recipe_label() -> str:
    """The engine recipe as JSON, recorded on the image (its full build manifest is inside)."""
    return json.dumps({
        "source": CAFFE_SOURCE.version,
        "tarballs": {t.name: t.sha256 for t in CAFFE_SOURCE.tarballs},
        "patches": {name: sha256_file(PATCH_DIR / name) for name in PROJECT_PATCHES},
    }, sort_keys=True, separators=(",", ":"))


def source_context(location: str | None, mirror: str | None) -> Path:
    """A folder holding exactly the two verified tarballs, passed as the ``caffe-source`` context."""
    cache = config.cache_home() / "sources"
    source.obtain(CAFFE_SOURCE, cache, location, mirror)
    context = config.cache_home() / "docker-source"
    context.mkdir(parents=True, exist_ok=True)
    for tarball in CAFFE_SOURCE.tarballs:
        if not (context / tarball.name).exists():
            shutil.copyfile(cache / tarball.name, context / tarball.name)
    return context


def build_argv(img: Image, project: Path, context: Path, push: bool = False) -> list[str]:
    """``docker build`` of ``img`` from the project's Dockerfile, the source tarballs as a build context."""
    if img.gpu:
        base = f"nvidia/cuda:{img.cuda}-cudnn"
        images = (f"{base}-devel-ubuntu{img.ubuntu}", f"{base}-runtime-ubuntu{img.ubuntu}")
        nccl = NCCL_FOR_CUDA[img.cuda]
    else:
        images, nccl = CPU_IMAGES, ""
    argv = ["docker", "build", "--file", str(project / "docker" / "Dockerfile"),
            "--build-arg", f"BUILD_IMAGE={images[0]}", "--build-arg", f"RUNTIME_IMAGE={images[1]}",
            "--build-arg", f"VARIANT={img.variant}", "--build-arg", f"CUDA_ARCH={GPU_ARCH}",
            "--build-arg", f"NCCL_VERSION={nccl}", "--build-context", f"caffe-source={context}",
            "--label", f"org.caffetool.engine.recipe={recipe_label()}",
            "--label", f"org.caffetool.variant={img.variant}", "--tag", img.tag]
    if push:
        argv.append("--push")
    return argv + [str(project)]


def run_argv(img: Image, uid: int, gid: int, data_dir: Path, runs_dir: Path, task: list[str],
             publish: str | None = None) -> list[str]:
    """``docker run`` for a task inside the image, as the calling user, data and runs mounted."""
    argv = ["docker", "run", "--rm", "--init", "--user", f"{uid}:{gid}", "--env", "HOME=/tmp",
            "--volume", f"{data_dir}:{CONTAINER_PROJECT}/data", "--volume", f"{runs_dir}:{CONTAINER_PROJECT}/runs"]
    if img.gpu:
        argv += ["--gpus", "all", "--shm-size", "1g"]
    if publish:
        argv += ["--publish", publish]
    return argv + [img.tag, *task]
