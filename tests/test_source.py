"""Source tarballs: every origin is verified against the pinned sha256 before use."""

from __future__ import annotations

import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from caffetool import config
from caffetool import apt
from caffetool.engine import source
from caffetool.engine.recipe import CAFFE_SOURCE
from caffetool.errors import ChecksumMismatch, SourceError

from .httpserver import Route, Server

REAL_CACHE = config.cache_home() / "sources"


@pytest.fixture
def tarball_dir(tmp_path, engine) -> Path:
    """A folder holding the two genuine tarballs (the engine's install left them in the cache)."""
    folder = tmp_path / "tarballs"
    folder.mkdir()
    for t in CAFFE_SOURCE.tarballs:
        shutil.copyfile(REAL_CACHE / t.name, folder / t.name)
    return folder


@pytest.fixture
def http_folder():
    """Serve a folder over loopback HTTP; yields (set_folder, base_url)."""
    state: dict[str, Path] = {}

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(state["root"]), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (lambda p: state.__setitem__("root", p)), f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_obtain_from_a_local_folder(tmp_path, tarball_dir):
    cache = tmp_path / "cache"
    assert source.obtain(CAFFE_SOURCE, cache, str(tarball_dir), None) == str(tarball_dir)
    assert sorted(p.name for p in cache.iterdir()) == sorted(t.name for t in CAFFE_SOURCE.tarballs)
    assert source.obtain(CAFFE_SOURCE, cache, None, None) == "cache"


def test_obtain_from_a_url(tmp_path, tarball_dir, http_folder):
    serve, url = http_folder
    serve(tarball_dir)
    cache = tmp_path / "cache"
    assert source.obtain(CAFFE_SOURCE, cache, url + "/", None) == url + "/"
    assert (cache / CAFFE_SOURCE.orig.name).stat().st_size == CAFFE_SOURCE.orig.size


def test_corrupt_tarball_is_refused_and_not_cached(tmp_path, tarball_dir):
    orig = tarball_dir / CAFFE_SOURCE.orig.name
    data = bytearray(orig.read_bytes())
    data[1000] ^= 0xFF
    orig.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch) as err:
        source.obtain(CAFFE_SOURCE, cache, str(tarball_dir), None)
    assert str(err.value).startswith(f"{CAFFE_SOURCE.orig.name} from {tarball_dir} has sha256 ")
    assert f"expected {CAFFE_SOURCE.orig.sha256}" in str(err.value)
    assert [p.name for p in cache.iterdir()] == []


def test_corrupt_cache_entry_is_replaced(tmp_path, tarball_dir):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / CAFFE_SOURCE.orig.name).write_bytes(b"truncated")
    source.obtain(CAFFE_SOURCE, cache, str(tarball_dir), None)
    assert (cache / CAFFE_SOURCE.orig.name).stat().st_size == CAFFE_SOURCE.orig.size


def test_missing_tarball_in_folder_names_it(tmp_path):
    with pytest.raises(SourceError, match=re.escape(f"{tmp_path}/{CAFFE_SOURCE.orig.name} not found")):
        source.obtain(CAFFE_SOURCE, tmp_path / "cache", str(tmp_path), None)


def test_unreachable_url_is_reported(tmp_path, http_folder):
    serve, url = http_folder
    serve(tmp_path)  # an empty folder: every file is a 404
    with pytest.raises(SourceError, match=re.escape(f"could not download {url}/{CAFFE_SOURCE.orig.name}")):
        source.obtain(CAFFE_SOURCE, tmp_path / "cache", url, None)


def test_interrupted_tarball_download_resumes_with_range(tmp_path, tarball_dir):
    bodies = {t.name: (tarball_dir / t.name).read_bytes() for t in CAFFE_SOURCE.tarballs}
    orig = CAFFE_SOURCE.orig.name
    with Server() as server:
        for name, body in bodies.items():
            server.routes[f"/src/{name}"] = Route(body=body, cut_after=1_000_000 if name == orig else None)
        cache = tmp_path / "cache"
        with pytest.raises(SourceError) as err:
            source.obtain(CAFFE_SOURCE, cache, f"{server.url}/src", None)
        reason = f"connection closed after 1000000 of {CAFFE_SOURCE.orig.size} bytes; the next attempt resumes from there"
        assert str(err.value) == f"could not download {server.url}/src/{orig}: {reason}"
        assert err.value.attempts == [(f"{server.url}/src/{orig}", reason)]
        assert source.obtain(CAFFE_SOURCE, cache, f"{server.url}/src", None) == f"{server.url}/src"
        assert server.routes[f"/src/{orig}"].requests == [None, "bytes=1000000-"]
    assert sorted(p.name for p in cache.iterdir()) == sorted(bodies)


def test_full_disk_while_copying_a_tarball_is_one_error_leaving_nothing(tmp_path, tarball_dir):
    from .smalldisk import small_disk

    with small_disk(tmp_path / "cache", "1m") as cache:
        with pytest.raises(SourceError, match=re.escape(f"no space left to write {cache} (No space left on device); "
                                                        f"free space in {cache} and rerun")):
            source.obtain(CAFFE_SOURCE, cache, str(tarball_dir), None)
        assert list(cache.iterdir()) == []


def test_patches_apply_to_the_genuine_source(tmp_path, tarball_dir):
    source.unpack(CAFFE_SOURCE, tarball_dir, tmp_path / "tree")
    applied = source.apply_patches(tmp_path / "tree", tmp_path / "log")
    assert [p.origin for p in applied].count("debian") == 6
    io_cpp = (tmp_path / "tree/src/caffe/util/io.cpp").read_text()
    assert "SetTotalBytesLimit(kProtoReadBytesLimit);" in io_cpp


def test_system_mirror_is_read_from_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/security.sources").write_text(
        "Types: deb\nURIs: http://mirror.test/debian-security\nSuites: bookworm-security\n"
        "Components: main\n"
    )
    assert apt.system_debian_mirror((tmp_path,)) is None
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.test/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert apt.system_debian_mirror((tmp_path,)) == "http://mirror.test/debian"
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.test/debian bullseye main\n")
    assert apt.system_debian_mirror((tmp_path,)) == "http://other.test/debian"


def test_ubuntu_sources_give_no_debian_mirror(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://archive.test/ubuntu noble main universe\n")
    assert apt.system_debian_mirror((tmp_path,)) is None


def test_missing_packages_lists_what_dpkg_lacks():
    assert apt.missing_packages(["dpkg", "caffetool-no-such-package"]) == ["caffetool-no-such-package"]


def _dpkg_version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True,
                          check=True).stdout


def test_owners_names_the_package_of_each_file_under_either_spelling_of_merged_usr(tmp_path, monkeypatch):
    if not shutil.which("dpkg-query"):
        pytest.skip("no dpkg here")
    zlib = Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve()  # zlib1g registered it under /lib
    if not zlib.is_file():
        pytest.skip("no x86_64 zlib here")
    (tmp_path / "own.so").write_bytes(b"")
    found = apt.owners([Path("/usr/bin/dpkg"), zlib, tmp_path / "own.so"])
    assert found == {Path("/usr/bin/dpkg"): f"dpkg {_dpkg_version('dpkg')}",
                     zlib: f"zlib1g {_dpkg_version('zlib1g')}"}
    assert apt.owners([]) == {}
    monkeypatch.setenv("PATH", str(tmp_path))  # no dpkg-query: every file is left to be named by its path
    assert apt.owners([Path("/usr/bin/dpkg")]) == {}
