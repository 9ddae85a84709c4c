"""Data sets declared as data: mirrors, files with their checksums, class names, local copies.

A file is identified by the sha256 of its *decompressed IDX content* (``idx_sha256``), which is
the same whoever compressed it: Debian recompresses Fashion-MNIST, so its ``.gz`` bytes differ
from the upstream mirrors' while the images are identical. Where the mirrors' own ``.gz`` digest
is known it is declared too (``sha256``) and accepted on its own, which lets a download be checked
without decompressing. A variant only overrides these lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from caffetool.choices import choose


@dataclass(frozen=True)
class IdxFile:
    role: str  # train-images, train-labels, test-images, test-labels
    name: str  # file name on the mirrors
    idx_size: int  # bytes once decompressed
    idx_sha256: str | None = None  # of the decompressed IDX bytes
    sha256: str | None = None  # of the file exactly as the mirrors serve it
    size: int | None = None  # of the file exactly as the mirrors serve it


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    title: str
    mirrors: tuple[str, ...]
    files: tuple[IdxFile, ...]
    classes: tuple[str, ...]
    local_dirs: tuple[Path, ...] = ()
    debian_package: str | None = None
    white_on_black: bool = True  # digits are light strokes on a dark ground
    citation: str = ""
    extra: dict = field(default_factory=dict)

    def file(self, role: str) -> IdxFile:
        return next(f for f in self.files if f.role == role)


SPLITS: dict[str, tuple[str, str]] = {
    "train": ("train-images", "train-labels"),
    "test": ("test-images", "test-labels"),
}

MNIST = DatasetSpec(
    name="mnist",
    title="MNIST handwritten digits",
    mirrors=(
        "http://yann.lecun.com/exdb/mnist/",
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    files=(
        IdxFile("train-images", "train-images-idx3-ubyte.gz", 47_040_016,
                sha256="440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", size=9_912_422),
        IdxFile("train-labels", "train-labels-idx1-ubyte.gz", 60_008,
                sha256="3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", size=28_881),
        IdxFile("test-images", "t10k-images-idx3-ubyte.gz", 7_840_016,
                sha256="8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", size=1_648_877),
        IdxFile("test-labels", "t10k-labels-idx1-ubyte.gz", 10_008,
                sha256="f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", size=4_542),
    ),
    classes=tuple(str(d) for d in range(10)),
    citation="Y. LeCun, C. Cortes, C. J. C. Burges, The MNIST database of handwritten digits",
)

FASHION_MNIST = DatasetSpec(
    name="fashion-mnist",
    title="Fashion-MNIST (Zalando article images)",
    mirrors=(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    ),
    files=(
        IdxFile("train-images", "train-images-idx3-ubyte.gz", 47_040_016,
                idx_sha256="c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
        IdxFile("train-labels", "train-labels-idx1-ubyte.gz", 60_008,
                idx_sha256="bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
        IdxFile("test-images", "t10k-images-idx3-ubyte.gz", 7_840_016,
                idx_sha256="5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
        IdxFile("test-labels", "t10k-labels-idx1-ubyte.gz", 10_008,
                idx_sha256="0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
    ),
    classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
             "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
    local_dirs=(Path("/usr/share/datasets/fashion-mnist"),),
    debian_package="dataset-fashion-mnist",
    citation="H. Xiao, K. Rasul, R. Vollgraf, Fashion-MNIST, arXiv:1708.07747",
)

DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (MNIST, FASHION_MNIST)}


def get(name: str) -> DatasetSpec:
    """The data set declared as ``name`` (any case)."""
    return DATASETS[choose(name, DATASETS, "--dataset")]
