"""Engine bundles: made from the real installed engine, installed into fresh prefixes, refused when unsuitable."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from caffetool import glog
from caffetool.engine import bundles, elf, locate, smoke
from caffetool.engine.locate import MANIFEST, pycaffe_imports
from caffetool.errors import BundleError, ChecksumMismatch, EngineCorrupt, EngineError, SourceError

from .httpserver import Route, Server

PROJECT = Path(__file__).resolve().parent.parent
# Level 3 keeps the suite fast; the archive layout, manifest and reproducibility do not depend on it.
FAST = 3


@pytest.fixture(scope="module")
def cpu_bundle(engine, tmp_path_factory) -> bundles.BundleResult:
    return bundles.make(engine.prefix, tmp_path_factory.mktemp("bundle") / "engine.tar.zst", level=FAST,
                       say=lambda _: None)


@pytest.fixture(scope="module")
def installed(cpu_bundle, tmp_path_factory) -> bundles.BundleInstall:
    prefix = tmp_path_factory.mktemp("bundle-install") / "engine"
    return bundles.install(str(cpu_bundle.path), prefix, link=False, say=lambda _: None)


def _no_library_path() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}


def test_bundle_is_reproducible(engine, cpu_bundle, tmp_path):
    again = bundles.make(engine.prefix, tmp_path / "again.tar.zst", level=FAST, say=lambda _: None)
    assert again.sha256 == cpu_bundle.sha256
    assert again.path.read_bytes() == cpu_bundle.path.read_bytes()
    sibling = cpu_bundle.path.with_name(cpu_bundle.path.name + ".sha256").read_text()
    assert sibling == f"{cpu_bundle.sha256}  {cpu_bundle.path.name}\n"


def test_manifest_names_recipe_machine_glibc_and_every_file(engine, cpu_bundle):
    manifest = bundles.read_manifest(cpu_bundle.path)
    assert manifest["engine"]["patches"] == engine.manifest["patches"]
    assert manifest["engine"]["options"]["cpu_only"] is True and manifest["cuda"] is None
    assert manifest["machine"] == os.uname().machine
    assert elf.version_tuple(manifest["glibc_floor"]) <= elf.version_tuple(elf.host_glibc())
    assert "bin/caffe" in manifest["files"] and "lib/vendor/libprotobuf.so.32" in manifest["files"]
    assert not set(manifest["vendored"]) & bundles.GLIBC_SONAMES
    with tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(cpu_bundle.path, "rb")), mode="r|") as tar:
        names = [m.name for m in tar]
    assert names[0] == bundles.BUNDLE_MANIFEST
    assert names[1:] == sorted(names[1:])
    assert not any("__pycache__" in n for n in names)


def test_every_elf_resolves_inside_the_install_or_to_glibc(installed):
    prefix = installed.engine.prefix
    elves = [p for p in prefix.rglob("*") if elf.is_elf(p)]
    assert len(elves) > 20
    for path in elves:
        assert elf.runpath(path).startswith("$ORIGIN"), path
        for dep in elf.dependencies(path):
            assert dep.path is not None, f"{path.name} needs {dep.soname}, which is not found"
            inside = prefix.resolve() in dep.path.resolve().parents
            assert inside or dep.soname in bundles.GLIBC_SONAMES, f"{path.name} loads {dep.path} from the system"


def test_a_library_in_a_folder_with_spaces_is_found_whole(tmp_path):
    """ldd's paths run to the load address: a prefix (or runs folder) with a space is read whole."""
    library = next(d for d in elf.dependencies(Path("/bin/ls")) if d.soname.startswith("libselinux"))
    side = tmp_path / "my engine" / "lib"
    side.mkdir(parents=True)
    shutil.copy(library.path, side / library.soname)
    found = {d.soname: d.path for d in elf.dependencies(Path("/bin/ls"), [side])}
    assert found[library.soname] == side / library.soname


def test_installed_bundle_trains_and_imports(installed):
    engine = locate(installed.engine.prefix)
    assert engine.version == "1.0.0"
    assert engine.manifest["bundle"]["sha256"]
    result = smoke.tiny_training(engine, iterations=30)
    assert result.last_loss < result.first_loss
    assert pycaffe_imports(engine.python_path) == (True, None)
    done = subprocess.run([str(engine.caffe), "--version"], capture_output=True, text=True, env=_no_library_path())
    assert done.stdout.strip() == "caffe version 1.0.0"


def test_second_install_of_the_same_bundle_is_a_no_op(cpu_bundle, installed):
    manifest = installed.engine.prefix / MANIFEST
    before = manifest.stat().st_mtime_ns
    again = bundles.install(str(cpu_bundle.path), installed.engine.prefix, link=False, say=lambda _: None)
    assert again.cached and manifest.stat().st_mtime_ns == before


@pytest.fixture
def pycaffe_link():
    """``engine.install`` points the venv's ``import caffe`` at the engine it installs: put it back."""
    import sysconfig

    from caffetool.engine.install import PTH_NAME

    pth = Path(sysconfig.get_path("purelib")) / PTH_NAME
    before = pth.read_text() if pth.exists() else None
    yield pth
    if before is None:
        pth.unlink(missing_ok=True)
    else:
        pth.write_text(before)


def test_engine_tasks_bundle_install_and_info(engine, tmp_path, pycaffe_link):
    """The command line: engine.bundle, engine.install --bundle, engine.info saying where it came from."""
    invoke = str(PROJECT / ".venv" / "bin" / "invoke")
    out = tmp_path / "cli.tar.zst"
    made = subprocess.run([invoke, "engine.bundle", "--out", str(out), "--level", "1"], cwd=PROJECT,
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert "vendored" in made.stdout and "glibc >=" in made.stdout
    prefix = tmp_path / "engine"
    before = pycaffe_link.read_text() if pycaffe_link.exists() else None
    done = subprocess.run([invoke, "engine.install", "--bundle", str(out), "--prefix", str(prefix)], cwd=PROJECT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^Caffe 1\.0\.0\S* installed from cli\.tar\.zst", done.stdout, re.M), done.stdout
    assert "pycaffe: not linked into this Python (a side prefix" in done.stdout  # import caffe stays as it was
    assert (pycaffe_link.read_text() if pycaffe_link.exists() else None) == before
    linked = subprocess.run([invoke, "engine.install", "--bundle", str(out), "--prefix", str(prefix), "--link-python"],
                            cwd=PROJECT, capture_output=True, text=True)
    assert linked.returncode == 0 and "already installed" in linked.stdout, linked.stderr
    assert pycaffe_link.read_text().strip() == str(prefix / "lib" / "python3" / "dist-packages")
    info = subprocess.run([invoke, "engine.info", "--prefix", str(prefix)], cwd=PROJECT, capture_output=True, text=True)
    assert "from bundle cli.tar.zst" in info.stdout
    level = subprocess.run([invoke, "engine.bundle", "--out", str(tmp_path / "x.tar.zst"), "--level", "40"],
                           cwd=PROJECT, capture_output=True, text=True)
    assert level.returncode != 0 and "Error: --level 40" in level.stderr and "Traceback" not in level.stderr


def test_install_from_url_with_sha256_beside_it(cpu_bundle, tmp_path):
    with Server() as server:
        server.routes["/b/engine.tar.zst"] = Route(cpu_bundle.path.read_bytes())
        server.routes["/b/engine.tar.zst.sha256"] = Route(f"{cpu_bundle.sha256}  engine.tar.zst\n".encode())
        done = bundles.install(f"{server.url}/b/engine.tar.zst", tmp_path / "engine", link=False, say=lambda _: None)
    assert (done.engine.prefix / "bin" / "caffe").exists()


def _nothing_left(prefix: Path) -> None:
    assert not prefix.exists()
    assert not [p for p in prefix.parent.iterdir() if p.name.startswith(f".{prefix.name}.staging-")]


def test_wrong_checksum_is_refused_and_nothing_installed(cpu_bundle, tmp_path):
    with pytest.raises(ChecksumMismatch, match="expected 0000"):
        bundles.install(str(cpu_bundle.path), tmp_path / "engine", sha256="0" * 64, link=False)
    _nothing_left(tmp_path / "engine")


def test_bundle_without_checksum_is_refused(cpu_bundle, tmp_path):
    lone = tmp_path / "lone.tar.zst"
    shutil.copyfile(cpu_bundle.path, lone)
    with pytest.raises(SourceError, match="--sha256"):
        bundles.install(str(lone), tmp_path / "engine", link=False)
    _nothing_left(tmp_path / "engine")


def test_corrupt_bundle_is_refused_and_nothing_installed(cpu_bundle, tmp_path):
    data = bytearray(cpu_bundle.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.tar.zst"
    bad.write_bytes(data)
    with pytest.raises(EngineCorrupt):
        bundles.install(str(bad), tmp_path / "engine", sha256=elf_sha(bad), link=False)
    _nothing_left(tmp_path / "engine")


def elf_sha(path: Path) -> str:
    from caffetool.checksum import sha256_file

    return sha256_file(path)


def _hostile_bundle(path: Path, manifest: dict, members: list[tuple[str, bytes]]) -> Path:
    with open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as zst, \
            tarfile.open(fileobj=zst, mode="w|") as tar:
        for name, data in [(bundles.BUNDLE_MANIFEST, json.dumps(manifest).encode()), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_member_outside_the_install_is_refused(cpu_bundle, tmp_path):
    manifest = bundles.read_manifest(cpu_bundle.path)
    manifest["files"] = {}
    evil = _hostile_bundle(tmp_path / "evil.tar.zst", manifest, [("../escaped", b"x")])
    with pytest.raises(EngineCorrupt, match="outside the install"):
        bundles.install(str(evil), tmp_path / "place" / "engine", sha256=elf_sha(evil), link=False)
    assert not (tmp_path / "place" / "escaped").exists()
    _nothing_left(tmp_path / "place" / "engine")


def test_not_a_bundle_is_refused(tmp_path):
    plain = _hostile_bundle(tmp_path / "plain.tar.zst", {}, [])
    plain.write_bytes(zstandard.ZstdCompressor().compress(b"not a tar archive at all" * 100))
    with pytest.raises(EngineCorrupt, match="not a"):
        bundles.read_manifest(plain)


def test_unsuitable_bundles_are_refused_with_the_reason(cpu_bundle):
    manifest = bundles.read_manifest(cpu_bundle.path)
    with pytest.raises(BundleError, match="built for aarch64"):
        bundles.check_suitable({**manifest, "machine": "aarch64"})
    with pytest.raises(BundleError, match="needs glibc 9.99"):
        bundles.check_suitable({**manifest, "glibc_floor": "9.99"})
    cuda = {**manifest, "cuda": {"major": 13}}
    assert bundles.driver_cuda_version() is None  # no NVIDIA driver on these machines
    assert bundles.check_suitable(cuda) == ["no NVIDIA driver here: this CUDA 13 engine runs on the CPU only"]


def test_cuda_driver_too_old_is_refused(cpu_bundle, monkeypatch):
    """Stand-in for a GPU machine (none exists here): a driver that serves CUDA 12.4 only."""
    monkeypatch.setattr(bundles, "driver_cuda_version", lambda: (12, 4))
    manifest = {**bundles.read_manifest(cpu_bundle.path), "cuda": {"major": 13}}
    with pytest.raises(BundleError, match="serves CUDA up to 12.4; the bundle needs CUDA 13"):
        bundles.check_suitable(manifest)


def test_cuda_libraries_found_where_the_wheels_put_them(tmp_path, monkeypatch):
    """The wheels' layout (nvidia/cu13/lib, nvidia/cudnn/lib) as on a GPU machine, made of empty files."""
    cuda = {"libraries": [{"soname": "libcudart.so.13", "folder": "nvidia/cu13/lib"},
                          {"soname": "libcudnn.so.9", "folder": "nvidia/cudnn/lib"}]}
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "lib" / "libcudart.so.13").touch()
    monkeypatch.syspath_prepend(str(site))
    assert bundles.find_cuda_folder(cuda) is None  # cuDNN missing: not this folder
    (site / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").touch()
    assert bundles.find_cuda_folder(cuda) == (site / "nvidia").resolve()


# ---------------------------------------------------------------------------------------------
# a bare system


BUILD_LIBRARIES = ("libprotobuf.so.32", "libglog.so.1", "libopenblas.so.0", "libboost_python311.so.1.74.0",
                   "libhdf5_serial.so.103", "libpython3.11.so.1.0", "libgfortran.so.5")


@pytest.fixture(scope="module")
def bare_root(tmp_path_factory) -> Path:
    """A fresh Debian 12 minbase tree: no compiler, no Boost, no protobuf, no BLAS, no Python."""
    from caffetool import apt

    root = tmp_path_factory.mktemp("bare") / "root"
    mirror = apt.system_debian_mirror() or "http://deb.debian.org/debian"
    done = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root), mirror],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-1000:] + done.stderr[-1000:]
    return root


class _Mounts:
    """Read-only bind mounts into the root, always undone (pytest then removes the tree)."""

    def __init__(self, root: Path) -> None:
        self.root, self.points = root, []

    def bind(self, source: Path) -> None:
        point = self.root / source.relative_to("/")
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(source), str(point)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(point)], check=True)
        self.points.append(point)

    def __enter__(self) -> "_Mounts":
        return self

    def __exit__(self, *exc: object) -> None:
        for point in reversed(self.points):
            subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.slow
def test_cpu_bundle_runs_on_a_bare_debian_root(cpu_bundle, bare_root):
    import sys

    for name in BUILD_LIBRARIES:
        assert not list(bare_root.glob(f"usr/lib/*/{name}")), f"the bare root already has {name}"
    assert not (bare_root / "usr" / "bin" / "python3").exists()
    bundles.install(str(cpu_bundle.path), bare_root / "opt" / "caffe", link=False, say=lambda _: None)

    def chroot(*argv: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "GLOG_logtostderr": "1"}
        tool = shutil.which("chroot") or "/usr/sbin/chroot"
        return subprocess.run([tool, str(bare_root), *argv], capture_output=True, text=True, env=env)

    # Every running system has /proc, and glibc needs it: the loader reads /proc/self/exe to expand a
    # program's $ORIGIN.
    with _Mounts(bare_root) as mounts:
        mounts.bind(Path("/proc"))
        version = chroot("/opt/caffe/bin/caffe", "--version")
        assert version.stdout.strip() == "caffe version 1.0.0", version.stderr

        work = bare_root / "work"
        work.mkdir()
        (work / "net.prototxt").write_text(smoke.NET)
        (work / "solver.prototxt").write_text(smoke.SOLVER.format(net="net.prototxt", iterations=50))
        train = chroot("/bin/sh", "-c", "cd /work && /opt/caffe/bin/caffe train -solver solver.prototxt")
        losses = glog.losses(train.stderr)
        assert train.returncode == 0, train.stderr[-1500:]
        assert losses[-1][0] == 50 and losses[-1][1] < losses[0][1] / 10

        # pycaffe with the venv's own Python (its interpreter and packages bound in, read-only)
        (work / "deploy.prototxt").write_text(
            'input: "data" input_shape { dim: 2 dim: 8 }\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 3 weight_filler { type: "constant" value: 0.5 } } }\n')
        code = ("import sys; sys.path.insert(0, '/opt/caffe/lib/python3/dist-packages'); import caffe, numpy; "
                "net = caffe.Net('/work/deploy.prototxt', caffe.TEST); net.blobs['data'].data[...] = 1.0; "
                "out = net.forward()['ip']; print(caffe.__file__, out.shape, float(out.sum()))")
        mounts.bind(Path(sys.base_prefix))
        mounts.bind(PROJECT / ".venv")
        done = chroot(str(PROJECT / ".venv" / "bin" / "python"), "-c", code)
        assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.split() == ["/opt/caffe/lib/python3/dist-packages/caffe/__init__.py", "(2,", "3)", "24.0"]


def test_force_never_deletes_what_caffetool_did_not_make(cpu_bundle, tmp_path):
    """``--force`` replaces an engine caffetool installed; a folder of the user's files, or a Caffe
    source tree (where CAFFE_ROOT points by Caffe's convention), is refused by name and left as it was."""
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("keep me")
    with pytest.raises(EngineError, match=r"mine holds files caffetool did not make \(notes.txt\), not an engine"):
        bundles.install(str(cpu_bundle.path), users, force=True, link=False, say=lambda _: None)
    checkout = tmp_path / "caffe"
    (checkout / "include" / "caffe").mkdir(parents=True)
    (checkout / "include" / "caffe" / "caffe.hpp").write_text("// BVLC")
    (checkout / "src" / "caffe").mkdir(parents=True)
    (checkout / "examples").mkdir()
    with pytest.raises(EngineError, match=r"caffe is a Caffe source tree, not an engine caffetool installed; .*"
                                          r"unset CAFFE_ROOT"):
        bundles.install(str(cpu_bundle.path), checkout, force=True, link=False, say=lambda _: None)
    with pytest.raises(EngineCorrupt) as found:
        locate(checkout)
    assert "--force" not in str(found.value) and "is a Caffe source tree" in str(found.value)
    assert (users / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in checkout.iterdir()) == ["examples", "include", "src"]
    done = bundles.install(str(cpu_bundle.path), tmp_path / "engine", link=False, say=lambda _: None)
    (done.engine.prefix / "notes.txt").write_text("keep me")  # the user's, inside caffetool's prefix
    (done.engine.prefix / "share" / "caffe" / "mine").mkdir()
    (done.engine.prefix / "share" / "caffe" / "mine" / "net.prototxt").write_text("mine")
    said: list[str] = []
    again = bundles.install(str(cpu_bundle.path), tmp_path / "engine", force=True, link=False, say=said.append)
    assert not again.cached and again.engine.prefix == done.engine.prefix  # caffetool's own: replaced
    assert (again.engine.prefix / "notes.txt").read_text() == "keep me"
    assert (again.engine.prefix / "share" / "caffe" / "mine" / "net.prototxt").read_text() == "mine"
    assert any(line.startswith("kept 2 file(s) of yours") for line in said), said
