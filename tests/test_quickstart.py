"""The main job's data step: MNIST first, Fashion-MNIST when MNIST cannot be reached."""

from __future__ import annotations

import dataclasses

from caffetool import quickstart
from caffetool.data import registry

from .httpserver import Server


def test_unreachable_mnist_falls_back_to_fashion_mnist_and_says_so(tmp_path, monkeypatch):
    with Server() as server:  # every path answers 404
        dead = dataclasses.replace(registry.MNIST, mirrors=(f"{server.url}/mnist/",))
        monkeypatch.setitem(registry.DATASETS, "mnist", dead)
        messages: list[str] = []
        dataset = quickstart.prepare_data(tmp_path, messages.append)
    assert dataset.name == "fashion-mnist"
    assert messages[0].startswith("MNIST handwritten digits: no source reachable "
                                  f"({server.url}/mnist/train-images-idx3-ubyte.gz: HTTP 404")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fashion-mnist"]
