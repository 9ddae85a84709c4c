"""The data set a job uses unasked: MNIST first, Fashion-MNIST when MNIST cannot be reached."""

from __future__ import annotations

import dataclasses

import pytest

from caffetool.data import preference, registry
from caffetool.errors import SourceError

from .httpserver import Server


def test_unreachable_mnist_falls_back_to_fashion_mnist_and_says_so(tmp_path, monkeypatch):
    with Server() as server:  # every path answers 404
        dead = dataclasses.replace(registry.MNIST, mirrors=(f"{server.url}/mnist/",))
        monkeypatch.setitem(registry.DATASETS, "mnist", dead)
        messages: list[str] = []
        dataset = preference.first_available(tmp_path, messages.append)
    assert dataset.name == "fashion-mnist"
    assert messages[0].startswith("MNIST handwritten digits: no source reachable "
                                  f"({server.url}/mnist/train-images-idx3-ubyte.gz: HTTP 404")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fashion-mnist"]


def test_no_data_set_lists_every_attempt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with Server() as server:
        dead = dataclasses.replace(registry.MNIST, mirrors=(f"{server.url}/a/", f"{server.url}/b/"))
        monkeypatch.setitem(registry.DATASETS, "mnist", dead)
        with pytest.raises(SourceError) as err:
            preference.first_available(tmp_path / "data", lambda _: None, preferred=("mnist",))
    name = "train-images-idx3-ubyte.gz"
    assert err.value.attempts == [(f"{server.url}/a/{name}", "HTTP 404 Not Found"),
                                  (f"{server.url}/b/{name}", "HTTP 404 Not Found")]
    assert str(err.value).startswith(f"no data set could be obtained:\nmnist: could not obtain {name}; tried:\n"
                                     f"  {server.url}/a/{name}: HTTP 404 Not Found\n")
