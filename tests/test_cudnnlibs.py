"""cuDNN 9's sub-libraries, checked without a GPU: each beside ``libcudnn.so.9`` and resolving.

The libraries here are real shared objects built by gcc under cuDNN's file names (cuDNN itself is
hundreds of megabytes): what is checked is where files are and what the loader resolves."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from caffetool.engine import bundles, cudnnlibs
from caffetool.errors import EngineError

ALL = ("libcudnn.so.9", *cudnnlibs.SUBLIBRARIES[9])


def shared_object(path: Path, soname: str, links: list[Path] = ()) -> Path:
    source = path.with_suffix(".c")
    source.write_text(f"int {path.name.split('.')[0]}_symbol(void) {{ return 0; }}\n")
    flags = ["-Wl,--no-as-needed"] + [f for lib in links for f in (str(lib), f"-Wl,-rpath,{lib.parent}")]
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", str(source), "-o", str(path), *flags],
                   check=True)
    source.unlink()
    return path


def cudnn_folder(folder: Path, names=ALL, graph_needs: Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        links = [graph_needs] if graph_needs is not None and name == "libcudnn_graph.so.9" else []
        shared_object(folder / name, name, links)
    return folder


def test_a_complete_cudnn_passes(tmp_path):
    check = cudnnlibs.check_folder(cudnn_folder(tmp_path / "cudnn"))
    assert check.ok and check.files == tuple(sorted(ALL))
    assert check.summary() == f"8 libraries in {tmp_path / 'cudnn'}, every sub-library present and resolving"


def test_missing_and_unloadable_sub_libraries_are_named(tmp_path):
    needed = shared_object(tmp_path / "libneeded.so.1", "libneeded.so.1")
    folder = cudnn_folder(tmp_path / "cudnn", [n for n in ALL if n != "libcudnn_adv.so.9"], graph_needs=needed)
    needed.unlink()  # the loader can no longer find what libcudnn_graph needs
    check = cudnnlibs.check_folder(folder)
    assert not check.ok
    assert check.absent == ("libcudnn_adv.so.9",) and check.unresolved == {"libcudnn_graph.so.9": ("libneeded.so.1",)}
    assert check.summary() == (f"in {folder}: missing libcudnn_adv.so.9; libcudnn_graph.so.9 cannot find "
                               "libneeded.so.1")


def test_the_folder_is_the_one_the_engine_loads_cudnn_from(tmp_path):
    folder = cudnn_folder(tmp_path / "wheel" / "nvidia" / "cudnn" / "lib")
    engine_library = shared_object(tmp_path / "libcaffe.so", "libcaffe.so", [folder / "libcudnn.so.9"])
    assert cudnnlibs.check_engine(engine_library).folder == folder
    plain = shared_object(tmp_path / "libplain.so", "libplain.so")
    assert cudnnlibs.check_engine(plain) is None


def test_a_bundle_is_refused_before_install_when_its_cudnn_would_not_load(tmp_path):
    site = tmp_path / "site-packages"
    cudnn_folder(site / "nvidia" / "cudnn" / "lib", ALL[:-1])
    cuda = {"libraries": [{"soname": "libcudnn.so.9", "folder": "nvidia/cudnn/lib"}],
            "requirements": ["nvidia-cudnn-cu13>=9.12.0.46,<10"]}
    with pytest.raises(EngineError, match=r"cuDNN 9 would fail at its first convolution on a GPU "
                                          r"\(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED\): in .*: missing "
                                          r"libcudnn_adv.so.9; reinstall it: pip install --force-reinstall "
                                          r"'nvidia-cudnn-cu13>=9.12.0.46,<10'"):
        bundles._cudnn_loads(cuda, site / "nvidia")
    shared_object(site / "nvidia" / "cudnn" / "lib" / "libcudnn_adv.so.9", "libcudnn_adv.so.9")
    assert bundles._cudnn_loads(cuda, site / "nvidia").ok
