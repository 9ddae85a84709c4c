"""A user's files inside an engine prefix outlive ``engine.install --force``: carried into the new tree,
or refused by name where the new engine writes the same path."""

from __future__ import annotations

from pathlib import Path

import pytest

from caffetool.engine import userfiles
from caffetool.errors import EngineError


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


ENGINE = {"bin/caffe": "old", "lib/libcaffe.so": "old", "share/caffe/lenet.prototxt": "old",
          "caffetool-engine.json": "{}"}


def test_an_installs_listing_tells_the_users_files_from_its_own(tmp_path):
    old = tree(tmp_path / "old", ENGINE)
    userfiles.record(old)
    tree(old, {"notes.txt": "mine", "share/caffe/mine/net.prototxt": "mine",
               "lib/python3/caffe/__pycache__/x.pyc": "cache"})
    new = tree(tmp_path / "new", {**ENGINE, "bin/caffe": "new", "bin/upgrade_net_proto_text": "new"})
    said = []
    kept = userfiles.carry_over(old, new, said.append)
    assert sorted(map(str, kept)) == ["notes.txt", "share/caffe/mine/net.prototxt"]
    assert (new / "notes.txt").read_text() == "mine" and (new / "share/caffe/mine/net.prototxt").read_text() == "mine"
    assert (new / "bin/caffe").read_text() == "new" and not (new / "lib/python3").exists()
    assert said == ["kept 2 file(s) of yours from the engine it replaces: notes.txt, share/caffe/mine/net.prototxt"]


def test_a_prefix_without_a_listing_keeps_what_the_new_engine_does_not_have(tmp_path):
    old = tree(tmp_path / "old", {**ENGINE, "lib/libold_only.so": "old", "todo.md": "mine",
                                  "share/caffe/mine/net.prototxt": "mine"})
    new = tree(tmp_path / "new", ENGINE)
    kept = userfiles.carry_over(old, new, lambda _: None)
    # the folders a build fills are caffetool's; what else the new engine lacks is carried, to be safe
    assert sorted(map(str, kept)) == ["share/caffe/mine/net.prototxt", "todo.md"]


def test_a_users_file_where_the_new_engine_writes_is_refused_by_name(tmp_path):
    old = tree(tmp_path / "old", ENGINE)
    userfiles.record(old)
    listing = old / userfiles.LISTING
    listing.write_text(listing.read_text().replace("share/caffe/lenet.prototxt\n", ""))  # the user's edit
    new = tree(tmp_path / "new", ENGINE)
    with pytest.raises(EngineError, match=r"old holds files that caffetool did not install where the new engine puts "
                                          r"its own \(share/caffe/lenet.prototxt\); move them out"):
        userfiles.carry_over(old, new, lambda _: None)
    assert (new / "share/caffe/lenet.prototxt").read_text() == "old"


def test_a_link_to_a_folder_is_one_entry(tmp_path):
    libs = tree(tmp_path / "cuda-libs", {"libcudnn.so.9": "x"})
    old = tree(tmp_path / "old", ENGINE)
    (old / "cuda").symlink_to(libs)
    userfiles.record(old)
    assert "cuda" in (old / userfiles.LISTING).read_text().split() and "libcudnn" not in (old / userfiles.LISTING).read_text()
