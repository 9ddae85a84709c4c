"""Downloads from a loopback HTTP server: success, fail-over, resume, corruption, a hung server."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import time

import pytest

from caffetool.data import fetch
from caffetool.data.registry import MNIST, IdxFile
from caffetool.errors import SourceError

from .httpserver import Route, Server
from .idxfiles import images_bytes, labels_bytes, random_set


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
