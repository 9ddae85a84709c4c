"""The CUDA library wheels a GPU bundle declares: at least the version its engine was built against."""

from __future__ import annotations

import pytest

from caffetool.engine import bundles, cudalibs
from caffetool.errors import EngineError

BUILT = ["nvidia-cublas==13.0.2.14", "nvidia-curand==10.4.0.35", "nvidia-cuda-cccl==13.0.85",
         "nvidia-cudnn-cu13==9.12.0.46", "nvidia-nccl-cu13==2.27.7"]


def test_the_built_version_is_the_floor_within_the_major():
    cudnn = cudalibs.library(13, "libcudnn.so.9")
    assert cudalibs.requirement(cudnn, BUILT) == "nvidia-cudnn-cu13>=9.12.0.46,<10"
    assert cudalibs.requirement(cudalibs.library(13, "libnccl.so.2"), BUILT) == "nvidia-nccl-cu13>=2.27.7,<3"
    # nvcc's own runtime is no wheel: any CUDA 13 runtime wheel
    assert cudalibs.requirement(cudalibs.library(13, "libcudart.so.13"), BUILT) == "nvidia-cuda-runtime>=13,<14"
    assert cudalibs.requirement(cudnn, []) == "nvidia-cudnn-cu13>=9,<10"


def test_wheels_older_than_the_build_or_missing_are_named():
    import numpy

    have = numpy.__version__
    assert cudalibs.too_old([f"numpy>={have},<{int(have.split('.')[0]) + 1}"]) == []
    assert cudalibs.too_old(["numpy>=999.1,<1000"]) == [f"numpy {have} (needs >=999.1,<1000)"]
    assert cudalibs.too_old(["numpy>=1,<2"]) == ([] if have.startswith("1.") else [f"numpy {have} (needs >=1,<2)"])
    assert cudalibs.too_old(["no-such-wheel-here>=1,<2"]) == ["no-such-wheel-here not installed (needs >=1)"]
    assert cudalibs.version_tuple("9.19.0.56") > cudalibs.version_tuple("9.12.0.46")


def test_a_bundle_refuses_libraries_older_than_it_was_built_against(tmp_path, monkeypatch):
    """The libraries are found (stand-in files where the wheels put them; no GPU libraries exist here)
    but this Python's wheel metadata says they are older than the build: refused, with the fix."""
    cuda = {"libraries": [{"soname": "libcudnn.so.9", "folder": "nvidia/cudnn/lib"}],
            "requirements": ["nvidia-cudnn-cu13>=9.12.0.46,<10"]}
    site = tmp_path / "site"
    (site / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").touch()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(cudalibs, "installed", lambda names: {name: "9.10.0.1" for name in names})
    with pytest.raises(EngineError) as refused:
        bundles._cuda_libraries(cuda, pip=False, say=print)
    assert "nvidia-cudnn-cu13 9.10.0.1 (needs >=9.12.0.46,<10)" in str(refused.value)
    assert "pip install -U 'nvidia-cudnn-cu13>=9.12.0.46,<10'" in str(refused.value)
    monkeypatch.setattr(cudalibs, "installed", lambda names: {name: "9.19.0.56" for name in names})
    assert bundles._cuda_libraries(cuda, pip=False, say=print) == (site / "nvidia").resolve()
