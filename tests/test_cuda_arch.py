"""Which GPUs a CUDA engine runs on: the default architecture list, what BVLC's CMake makes of it,
the device code nvcc writes (read back from the fat binary), and the refusal before a GPU command
on a card the engine has no kernels for.

nvcc (CUDA 13 on the project's machines) compiles here without a GPU; the cards are NVML answers
written into the tests (stand-ins for a GPU, named so below), since no GPU is here to answer."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from caffetool.engine import cudaarch, fatbin, install
from caffetool.engine.fatbin import Architectures
from caffetool.engine.recipe import BuildOptions
from caffetool.errors import BuildError, ConfigError

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA compiler) is not installed here")
KERNEL = "__global__ void add_one(float* x) { x[threadIdx.x] += 1.f; }\nvoid launch(float* x) { add_one<<<1, 32>>>(x); }\n"


def compile_library(folder: Path, flags: list[str]) -> Path:
    """A shared library of one kernel, built by nvcc with ``flags`` (``-gencode ...``)."""
    source = folder / "kernel.cu"
    source.write_text(KERNEL)
    library = folder / "libkernel.so"
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", *flags, str(source), "-o", str(library)],
                   check=True, capture_output=True)
    return library


def gencode(sm: list[str], ptx: list[str]) -> list[str]:
    return [f for a in sm for f in ("-gencode", f"arch=compute_{a},code=sm_{a}")] + \
           [f for a in ptx for f in ("-gencode", f"arch=compute_{a},code=compute_{a}")]


def fake_nvcc(folder: Path, listing: str) -> Path:
    """A program answering ``--list-gpu-code`` as an nvcc of another CUDA release would."""
    program = folder / "nvcc"
    program.write_text(f"#!/bin/sh\nprintf '%s\\n' {listing}\n")
    program.chmod(0o755)
    return program


# ---- the fat binary reader --------------------------------------------------------------------

@needs_nvcc
def test_the_reader_sees_each_cubin_and_ptx_nvcc_wrote(tmp_path):
    library = compile_library(tmp_path, gencode(["75", "90"], ["90"]))
    assert fatbin.architectures(library) == Architectures(("75", "90"), ("90",))
    assert fatbin.architectures(compile_library(tmp_path, gencode(["80"], []))) == Architectures(("80",), ())


def test_a_file_without_device_code_carries_none(tmp_path):
    assert fatbin.architectures(Path(shutil.which("ls"))) == Architectures((), ())
    (tmp_path / "not-elf").write_text("text")
    with pytest.raises(BuildError, match="not-elf: cannot read its device code"):
        fatbin.architectures(tmp_path / "not-elf")


@pytest.mark.parametrize("code,capability,runs,jit", [
    (Architectures(("75", "90"), ("90",)), (9, 0), True, False),
    (Architectures(("75", "90"), ("90",)), (7, 5), True, False),
    (Architectures(("80",), ()), (8, 6), True, False),  # sm_80 machine code runs on later 8.x
    (Architectures(("86",), ()), (8, 0), False, False),  # never on an earlier minor
    (Architectures(("75", "90"), ("90",)), (12, 0), True, True),  # newer card: PTX compiled at start
    (Architectures(("75", "90"), ()), (12, 0), False, False),
    (Architectures(("90",), ("90",)), (8, 9), False, False),  # PTX never runs on an older card
])
def test_which_cards_run_which_code(code, capability, runs, jit):
    assert code.runs_on(capability) is runs
    assert code.jit_only(capability) is jit


# ---- the default list ------------------------------------------------------------------------

def test_the_default_is_every_real_architecture_nvcc_lists_from_volta(tmp_path):
    cuda12 = fake_nvcc(tmp_path, "sm_50 sm_52 sm_60 sm_61 sm_70 sm_72 sm_75 sm_80 sm_86 sm_87 sm_89 sm_90 sm_90a "
                                 "sm_100 sm_100a sm_101 sm_120 __nvcc_device_query")
    assert cudaarch.supported(cuda12) == ("50", "52", "60", "61", "70", "72", "75", "80", "86", "87", "89", "90",
                                          "100", "101", "120")
    assert cudaarch.default(cuda12) == ("70", "72", "75", "80", "86", "87", "89", "90", "100", "101", "120")


@needs_nvcc
def test_the_installed_nvcc_default_reaches_blackwell():
    arch = cudaarch.default(Path(NVCC))
    assert arch[0] in ("70", "75") and {"80", "86", "89", "90", "100", "120"} <= set(arch)
    assert arch == tuple(sorted(arch, key=int))


def test_a_compiler_that_lists_nothing_is_named(tmp_path):
    with pytest.raises(BuildError, match=r"--list-gpu-code` listed no GPU architectures .*name them with --cuda-arch"):
        cudaarch.supported(fake_nvcc(tmp_path, "''"))
    with pytest.raises(BuildError, match="does not run"):
        cudaarch.supported(tmp_path / "missing" / "nvcc")


def test_cuda_arch_takes_either_spelling_and_refuses_what_the_compiler_lacks(tmp_path):
    assert cudaarch.parse("9.0 7.5,80 75") == ("75", "80", "90")
    with pytest.raises(ConfigError, match=r"--cuda-arch 'sm_90': give compute capabilities such as '75 80 90'"):
        cudaarch.parse("sm_90")
    cuda13 = fake_nvcc(tmp_path, "sm_75 sm_80 sm_90 sm_120")
    with pytest.raises(ConfigError, match=r"cannot compile for 61, 70; it supports 75 80 90 120"):
        cudaarch.parse("61 70 90", cuda13)


# ---- BVLC's cmake/Cuda.cmake, as the engine's build runs it -----------------------------------

def bvlc_arch_flags(engine, folder: Path, cuda_version: str, arch: tuple[str, ...]) -> str:
    """``caffe_select_nvcc_arch_flags`` from the engine's own copy of BVLC's Cuda.cmake, run by
    ``cmake -P`` as the recipe configures it (CUDA_ARCH_NAME Manual, the newest as PTX)."""
    share = engine.prefix / "share" / "caffe" / "cmake"
    if not (share / "Cuda.cmake").exists():
        pytest.skip("the engine predates keeping BVLC's cmake files (reinstall with --force)")
    function = re.search(r"function\(caffe_select_nvcc_arch_flags.*?\nendfunction\(\)",
                         (share / "Cuda.cmake").read_text(), re.S).group(0)
    unique = re.search(r"macro\(caffe_list_unique.*?\nendmacro\(\)", (share / "Utils.cmake").read_text(), re.S).group(0)
    script = folder / "flags.cmake"
    script.write_text(f'{unique}\n{function}\nset(CUDA_VERSION "{cuda_version}")\n'
                      'caffe_select_nvcc_arch_flags(flags)\nmessage("${flags_readable}")\n')
    done = subprocess.run(["cmake", "-DCUDA_ARCH_NAME=Manual", f"-DCUDA_ARCH_BIN={' '.join(arch)}",
                           f"-DCUDA_ARCH_PTX={arch[-1]}", "-P", str(script)], capture_output=True, text=True, check=True)
    return done.stderr.strip()


ALL_CUDA13 = ("75", "80", "86", "87", "88", "89", "90", "100", "103", "110", "120", "121")


@pytest.mark.parametrize("version", ["10.0", "11.8", "12.4", "12.8", "13.0"])
def test_bvlc_cmake_passes_every_architecture_for_cuda_10_and_later(engine, tmp_path, version):
    readable = bvlc_arch_flags(engine, tmp_path, version, ALL_CUDA13)
    assert readable.split() == [f"sm_{a}" for a in ALL_CUDA13] + ["compute_121"]


def test_bvlc_cmake_would_break_120_only_for_cuda_9(engine, tmp_path):
    """Cuda.cmake drops Fermi's "20" with a string replace when CUDA is not older than 9.0, but
    compares versions as strings: "10.0" < "9.0", so it runs for CUDA 9.x alone — where it would
    turn 120 into 1. The recipe relies on that; this is the reason it may."""
    assert bvlc_arch_flags(engine, tmp_path, "9.2", ("75", "80", "120")).split() == ["sm_75", "sm_80", "sm_1",
                                                                                     "compute_120"]


@needs_nvcc
def test_the_default_list_becomes_device_code_for_every_architecture(engine, tmp_path):
    """The whole chain without a GPU: the default list, BVLC's CMake function, nvcc, and the fat
    binary read back — machine code for each architecture, PTX for the newest."""
    arch = cudaarch.default(Path(NVCC))
    version = re.search(r"release (\d+\.\d+)", subprocess.run([NVCC, "--version"], capture_output=True,
                                                                text=True).stdout).group(1)
    readable = bvlc_arch_flags(engine, tmp_path, version, arch).split()
    sm = [w.removeprefix("sm_") for w in readable if w.startswith("sm_")]
    ptx = [w.removeprefix("compute_") for w in readable if w.startswith("compute_")]
    library = compile_library(tmp_path, gencode(sm, ptx))
    assert fatbin.architectures(library) == Architectures(arch, arch[-1:])


@needs_nvcc
def test_a_build_that_lacks_an_architecture_it_was_asked_for_is_refused(tmp_path):
    staged = tmp_path / "staged"
    (staged / "lib").mkdir(parents=True)
    library = compile_library(tmp_path, gencode(["90"], ["90"]))
    (staged / "lib" / "libcaffe.so.1.0.0").write_bytes(library.read_bytes())
    (staged / "lib" / "libcaffe.so").symlink_to("libcaffe.so.1.0.0")
    code = install._device_code(staged, BuildOptions(cuda=True, cuda_arch=("90",)))
    assert code == Architectures(("90",), ("90",))
    with pytest.raises(BuildError, match=r"lacks device code it was asked for: sm_80, sm_120, PTX 120 \(it carries "
                                         r"sm_90, PTX 9.0\)"):
        install._device_code(staged, BuildOptions(cuda=True, cuda_arch=("80", "90", "120")))


# ---- the refusal before a GPU command --------------------------------------------------------

FIX = "`caffetool engine.install --cuda --cuda-arch {arch} --force`"


def stub_nvml(*cards):
    """Stand-in for NVML's answer (no GPU here): the cards' names and compute capabilities."""
    return lambda: list(cards)


def test_a_card_the_engine_has_no_kernels_for_is_refused_naming_the_fix():
    hopper = Architectures(("90",), ("90",))
    with pytest.raises(ConfigError) as refused:
        cudaarch.check_card(hopper, [0], "the engine at /e", FIX, cards=stub_nvml(("Tesla T4", (7, 5))))
    assert str(refused.value) == ("GPU 0 (Tesla T4, compute capability 7.5) cannot run the engine at /e: it carries "
                                  "code for sm_90, PTX 9.0; rebuild it with "
                                  "`caffetool engine.install --cuda --cuda-arch 75 --force`")


def test_a_newer_card_runs_through_ptx_with_a_note_and_a_known_one_silently():
    code = Architectures(("75", "90"), ("90",))
    cards = stub_nvml(("NVIDIA H200", (9, 0)), ("NVIDIA GeForce RTX 5090", (12, 0)))
    assert cudaarch.check_card(code, [0], "the engine", FIX, cards=cards) == []
    (note,) = cudaarch.check_card(code, [0, 1], "the engine", FIX, cards=cards)
    assert note.startswith("GPU 1 (NVIDIA GeForce RTX 5090, compute capability 12.0) runs the engine through PTX "
                           "compiled when each process starts")
    assert note.endswith("`caffetool engine.install --cuda --cuda-arch 120 --force` gives it machine code")


def test_no_answer_from_nvml_leaves_the_decision_to_caffe():
    assert cudaarch.check_card(Architectures(("90",), ()), [0], "e", FIX, cards=lambda: None) == []
    assert cudaarch.check_card(Architectures((), ()), [0], "e", FIX, cards=stub_nvml(("Tesla T4", (7, 5)))) == []
