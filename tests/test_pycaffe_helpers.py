"""pycaffe as users call it, on the installed engine: BVLC's own pycaffe suite (``python/caffe/test``
from the pinned source, ``test_draw`` included), ``caffe.io``'s image and Datum helpers on today's
scikit-image and NumPy (engine patch 0010), and BVLC's Python tools (``draw_net.py``, ``classify.py``)
run as their documentation runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import cv2
import numpy as np
import pytest

from caffetool import config
from caffetool.engine.recipe import CAFFE_SOURCE

pytestmark = pytest.mark.engine


def with_pycaffe(engine) -> dict[str, str]:
    """The environment of a Python that imports the engine's pycaffe, quiet."""
    return {**os.environ, "PYTHONPATH": str(engine.python_path), "GLOG_minloglevel": "2"}


def test_bvlcs_whole_pycaffe_suite_passes(engine, tmp_path):
    """BVLC's ``python/caffe/test`` (52 tests: nets, solvers, NetSpec, Python layers, io, coord_map,
    draw) and the ``models/`` and ``examples/`` its drawing test walks, from the source the engine was
    built from, run with pytest against the installed engine."""
    tarball = config.cache_home() / "sources" / CAFFE_SOURCE.orig.name
    with tarfile.open(tarball) as tar:
        wanted = [m for m in tar.getmembers() if m.name.split("/")[0] in ("models", "examples")
                  or m.name.startswith("python/caffe/test")]
        tar.extractall(tmp_path, members=wanted, filter="data")
    suite = tmp_path / "python" / "caffe" / "test"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "-W", "ignore::DeprecationWarning", str(suite)], cwd=suite,
                          env={**with_pycaffe(engine), "TMPDIR": str(tmp_path)},  # its nets, kept with delete=False
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("52 passed"), done.stdout[-500:]


# A Python whose scikit-image and SciPy cannot be imported (None in sys.modules makes an import
# raise ImportError), then pycaffe as a runtime that only runs nets uses it.
WITHOUT_IMAGE_LIBRARIES = """
import sys
for name in ("skimage", "scipy"):
    sys.modules[name] = None
import numpy as np
import caffe
net_file = sys.argv[1]
with open(net_file, "w") as out:
    out.write('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }'
              'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
              'inner_product_param { num_output: 4 weight_filler { type: "xavier" } } }')
net = caffe.Net(net_file, caffe.TEST)
net.blobs["data"].data[...] = np.arange(6).reshape(2, 3)
print(net.forward()["ip"].shape, caffe.io.Transformer({"data": (2, 3, 1, 1)}).inputs["data"])
try:
    caffe.io.load_image(net_file)
except ImportError as error:
    print("load_image:", error)
"""


def test_pycaffe_runs_nets_without_scikit_image_or_scipy(engine, tmp_path):
    """``import caffe``, a net's forward pass and ``caffe.io``'s conversions need neither library:
    only ``load_image`` and ``resize_image`` import them, when called."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_IMAGE_LIBRARIES, str(tmp_path / "net.prototxt")],
                          env=with_pycaffe(engine), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "(2, 4) (2, 3, 1, 1)"
    assert lines[1].startswith("load_image: ") and "skimage" in lines[1]


def test_load_image_gives_what_bvlc_documents(caffe, tmp_path):
    """``caffe.io.load_image``: H x W x 3 float32 RGB in [0, 1], or H x W x 1 with ``color=False``, from a
    colour PNG and from a grey one."""
    rng = np.random.default_rng(0)
    bgr = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (6, 5), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "colour.png"), bgr)
    cv2.imwrite(str(tmp_path / "grey.png"), grey)
    colour = caffe.io.load_image(str(tmp_path / "colour.png"))
    assert colour.shape == (6, 5, 3) and colour.dtype == np.float32
    np.testing.assert_allclose(colour, bgr[:, :, ::-1] / 255.0, atol=1e-6)
    as_grey = caffe.io.load_image(str(tmp_path / "colour.png"), color=False)
    assert as_grey.shape == (6, 5, 1) and 0 <= as_grey.min() and as_grey.max() <= 1
    tiled = caffe.io.load_image(str(tmp_path / "grey.png"))
    assert tiled.shape == (6, 5, 3) and np.array_equal(tiled[:, :, 0], tiled[:, :, 2])
    np.testing.assert_allclose(tiled[:, :, 0], grey / 255.0, atol=1e-6)


def test_datums_of_bytes_and_of_floats_round_trip(caffe):
    pixels = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    datum = caffe.io.array_to_datum(pixels, label=7)
    assert datum.data == pixels.tobytes() and datum.label == 7
    back = caffe.io.datum_to_array(datum)
    assert np.array_equal(back, pixels) and back.flags.writeable
    floats = caffe.io.datum_to_array(caffe.io.array_to_datum(pixels.astype(np.float32) / 2))
    np.testing.assert_array_equal(floats, pixels / 2)


def test_draw_net_py_renders_a_net_as_its_usage_says(engine, tmp_path):
    """``python/draw_net.py NET OUT.png`` (BVLC's "how people look at a net"), through pydot and
    Graphviz's dot."""
    net = engine.prefix / "share" / "caffe" / "examples" / "mnist" / "lenet_train_test.prototxt"
    done = subprocess.run([sys.executable, str(engine.prefix / "python" / "draw_net.py"), str(net),
                           str(tmp_path / "lenet.png"), "--rankdir", "TB"], env=with_pycaffe(engine),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    image = cv2.imread(str(tmp_path / "lenet.png"))
    assert image is not None and image.shape[0] > image.shape[1] > 100  # top to bottom: taller than wide


def test_classify_py_classifies_an_image_as_its_usage_says(caffe, engine, tmp_path):
    """``python/classify.py`` on BVLC's CIFAR-10 quick net (seeded random weights): its predictions
    equal pycaffe's ``caffe.Classifier`` on the same image with the same options."""
    deploy = engine.prefix / "share" / "caffe" / "examples" / "cifar10" / "cifar10_quick.prototxt"
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(1)
    for blobs in net.params.values():
        for blob in blobs:
            blob.data[...] = rng.normal(0, 0.05, blob.data.shape)
    net.save(str(tmp_path / "quick.caffemodel"))
    cv2.imwrite(str(tmp_path / "image.png"), rng.integers(0, 256, (40, 48, 3), dtype=np.uint8))
    done = subprocess.run([sys.executable, str(engine.prefix / "python" / "classify.py"), "--model_def", str(deploy),
                           "--pretrained_model", str(tmp_path / "quick.caffemodel"), "--images_dim", "32,32",
                           "--mean_file", "", "--center_only", str(tmp_path / "image.png"), str(tmp_path / "out.npy")],
                          env=with_pycaffe(engine), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(tmp_path / "out.npy")
    classifier = caffe.Classifier(str(deploy), str(tmp_path / "quick.caffemodel"), image_dims=(32, 32),
                                  raw_scale=255.0, channel_swap=(2, 1, 0))
    expected = classifier.predict([caffe.io.load_image(str(tmp_path / "image.png"))], oversample=False)
    assert got.shape == (1, 10)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
