"""Downloads from a loopback HTTP server: success, fail-over, resume, corruption, a hung server."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import time

import pytest

from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST, MNIST, IdxFile
from caffetool.errors import DataError, SourceError

from .httpserver import Route, Server
from .idxfiles import images_bytes, labels_bytes, random_set
from .smalldisk import small_disk


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "caffetool" / "datasets"


def mnist_like(n_train=50, n_test=20):
    """MNIST's declaration with small synthetic files (the real mirrors are out of reach here)."""
    bodies, files = {}, []
    for role, name, data in _files(n_train, n_test):
        body = gzip.compress(data, mtime=0)
        bodies[name] = body
        files.append(IdxFile(role, name, len(data), sha256=hashlib.sha256(body).hexdigest(), size=len(body)))
    return dataclasses.replace(MNIST, files=tuple(files)), bodies


def fashion_like(n_train=50, n_test=20):
    """Fashion-MNIST's declaration (IDX content checksums only) with small synthetic files."""
    bodies, files = {}, []
    for role, name, data in _files(n_train, n_test):
        bodies[name] = gzip.compress(data, mtime=0)
        files.append(IdxFile(role, name, len(data), idx_sha256=hashlib.sha256(data).hexdigest()))
    return dataclasses.replace(FASHION_MNIST, files=tuple(files), local_dirs=(), debian_package=None), bodies


def _files(n_train, n_test):
    tr_i, tr_l = random_set(n_train, 28, 28, seed=1)
    te_i, te_l = random_set(n_test, 28, 28, seed=2)
    return [("train-images", "train-images-idx3-ubyte.gz", images_bytes(tr_i)),
            ("train-labels", "train-labels-idx1-ubyte.gz", labels_bytes(tr_l)),
            ("test-images", "t10k-images-idx3-ubyte.gz", images_bytes(te_i)),
            ("test-labels", "t10k-labels-idx1-ubyte.gz", labels_bytes(te_l))]


def serve(server, prefix, bodies, **faults):
    for name, body in bodies.items():
        server.routes[f"/{prefix}/{name}"] = Route(body=body, **faults.get(name, {}))


def test_fetch_mnist_from_a_mirror(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    with Server() as server:
        serve(server, "m1", bodies)
        result = fetch.fetch(spec, tmp_path / "data", progress=False, say=lambda _: None,
                             mirrors=(f"{server.url}/m1/",))
    ds = result.dataset
    assert (ds.count("train"), ds.count("test")) == (50, 20)
    assert ds.manifest["files"]["train-images"]["source"] == f"{server.url}/m1/train-images-idx3-ubyte.gz"
    assert ds.labels_file.read_text().split() == [str(d) for d in range(10)]


def test_failing_mirror_falls_over_to_the_next(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    with Server() as server:
        serve(server, "good", bodies)
        messages = []
        fetch.obtain(spec, None, 5, False, messages.append, mirrors=(f"{server.url}/missing/", f"{server.url}/good/"))
    assert messages[0] == f"train-images-idx3-ubyte.gz: verified, from {server.url}/good/train-images-idx3-ubyte.gz"


def test_interrupted_download_resumes_with_range(tmp_path, isolated_cache):
    spec, bodies = mnist_like(n_train=400)
    name = "train-images-idx3-ubyte.gz"
    with Server() as server:
        serve(server, "m", bodies, **{name: {"cut_after": 5000}})
        mirrors = (f"{server.url}/m/", f"{server.url}/m/")  # the same mirror, tried twice
        fetch.obtain(spec, None, 5, False, lambda _: None, mirrors=mirrors)
        requests = server.routes[f"/m/{name}"].requests
    assert requests == [None, "bytes=5000-"]
    assert (isolated_cache / "mnist" / name).read_bytes() == bodies[name]


def test_corrupt_download_is_deleted_and_named(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    name = "train-labels-idx1-ubyte.gz"
    bad = dict(bodies)
    bad[name] = bodies[name][:-1] + bytes([bodies[name][-1] ^ 1])
    with Server() as server:
        serve(server, "bad", bad)
        with pytest.raises(SourceError) as err:
            fetch.obtain(spec, None, 5, False, lambda _: None, mirrors=(f"{server.url}/bad/",))
    assert re.search(rf"{name} from {re.escape(server.url)}/bad/{name} failed verification: "
                     rf"file sha256 [0-9a-f]{{64}}.*expected file sha256 {spec.file('train-labels').sha256}",
                     str(err.value))
    assert not (isolated_cache / "mnist" / name).exists()
    assert not (isolated_cache / "mnist" / f"{name}.part").exists()


def test_hung_server_is_bounded_by_the_timeout(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    with Server() as server:
        serve(server, "hang", bodies, **{n: {"hang": True} for n in bodies})
        start = time.monotonic()
        with pytest.raises(SourceError, match="timed out"):
            fetch.obtain(spec, None, 1.0, False, lambda _: None, mirrors=(f"{server.url}/hang/",))
        assert time.monotonic() - start < 10


def test_source_url_is_tried_before_the_mirrors(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    with Server() as server:
        serve(server, "src", bodies)
        found = fetch.obtain(spec, f"{server.url}/src", 5, False, lambda _: None, mirrors=(f"{server.url}/nowhere/",))
    assert {f["source"] for f in found.values()} == {f"{server.url}/src/{n}" for n in bodies}


def corrupt(body, how):
    """A gzip file damaged three ways: inside the deflate stream, cut short, or with a wrong CRC."""
    if how == "deflate":
        return body[:10] + bytes([0xFF] * 8) + body[18:]
    if how == "truncated":
        return body[: len(body) // 2]
    return body[:-8] + bytes(4) + body[-4:]


REASONS = {"deflate": "corrupt gzip: Error -3 while decompressing data: invalid block type",
           "truncated": "corrupt gzip: the compressed stream ends early",
           "crc": "corrupt gzip: CRC check failed"}


@pytest.mark.parametrize("how", list(REASONS))
def test_corrupt_gzip_in_source_is_skipped_named_and_falls_back(tmp_path, isolated_cache, how):
    spec, bodies = fashion_like()
    name = "train-labels-idx1-ubyte.gz"
    source = tmp_path / "source"
    source.mkdir()
    for n, body in bodies.items():
        (source / n).write_bytes(corrupt(body, how) if n == name else body)
    messages = []
    with Server() as server:
        serve(server, "good", bodies)
        found = fetch.obtain(spec, str(source), 5, False, messages.append, mirrors=(f"{server.url}/good/",))
    skipped = [m for m in messages if "skipped" in m]
    assert len(skipped) == 1 and skipped[0].startswith(f"{name}: skipped {source / name} ({REASONS[how]}")
    assert found["train-labels"]["source"] == f"{server.url}/good/{name}"
    assert sorted(p.name for p in (isolated_cache / "fashion-mnist").iterdir()) == sorted([*bodies, "verified.json"])
    assert fetch.obtain(spec, str(source), 5, False, lambda _: None, mirrors=())["train-labels"]["path"].exists()


def test_corrupt_gzip_with_no_fallback_is_one_error_and_leaves_nothing(tmp_path, isolated_cache):
    spec, bodies = fashion_like()
    name = "train-images-idx3-ubyte.gz"
    source = tmp_path / "source"
    source.mkdir()
    (source / name).write_bytes(corrupt(bodies[name], "deflate"))
    with pytest.raises(SourceError) as err:
        fetch.obtain(spec, str(source), 5, False, lambda _: None, mirrors=())
    assert err.value.attempts == [(str(source / name), REASONS["deflate"])]
    assert str(err.value).startswith(f"fashion-mnist: could not obtain {name}; tried:\n  {name} from "
                                     f"{source / name} is not a readable gzip file ({REASONS['deflate']})")
    assert list((isolated_cache / "fashion-mnist").iterdir()) == []


def test_source_folder_entry_that_is_a_folder_is_skipped_and_named(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    name = "train-images-idx3-ubyte.gz"
    (tmp_path / "source" / name).mkdir(parents=True)
    messages = []
    with Server() as server:
        serve(server, "good", bodies)
        fetch.obtain(spec, str(tmp_path / "source"), 5, False, messages.append, mirrors=(f"{server.url}/good/",))
    assert messages[0] == f"{name}: skipped {tmp_path / 'source' / name} (is a directory)"


def test_stale_partial_download_from_another_body_is_discarded(tmp_path, isolated_cache):
    spec, bodies = mnist_like()
    name = "train-labels-idx1-ubyte.gz"
    (isolated_cache / "mnist").mkdir(parents=True)
    (isolated_cache / "mnist" / f"{name}.part").write_bytes(b"\0" * 100)  # resumed into a bad file
    with Server() as server:
        serve(server, "m", bodies)
        fetch.obtain(spec, None, 5, False, lambda _: None, mirrors=(f"{server.url}/m/", f"{server.url}/m/"))
        requests = server.routes[f"/m/{name}"].requests
    assert requests == ["bytes=100-", None]
    assert (isolated_cache / "mnist" / name).read_bytes() == bodies[name]
    assert not (isolated_cache / "mnist" / f"{name}.part").exists()


def test_full_disk_during_download_is_one_error_and_leaves_no_part(tmp_path, monkeypatch):
    spec, bodies = mnist_like(n_train=4000)  # 3 MB of random pixels for a 1 MB cache
    with small_disk(tmp_path / "cache", "1m") as disk, Server() as server:
        monkeypatch.setenv("XDG_CACHE_HOME", str(disk))
        serve(server, "m", bodies)
        with pytest.raises(DataError, match="no space left on device; nothing half-written was kept"):
            fetch.obtain(spec, None, 5, False, lambda _: None, mirrors=(f"{server.url}/m/",))
        left = [p.name for p in (disk / "caffetool" / "datasets" / "mnist").iterdir()]
    assert left == []
