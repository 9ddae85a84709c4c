"""``caffetool upgrade`` on public Python 2 Caffe projects that nobody here wrote, kept byte for byte
in ``tests/public/`` with their licences (each folder's README.md names the repository, commit and
path of every file): Yahoo's open_nsfw classifier, run after the upgrade on real photos, and
py-faster-rcnn's ``tools/`` and ``lib/``, parsed, imported and run in part after it, and Google's
DeepDream notebook (nbformat 3), run after it; and BVLC's siamese notebook (from the engine's
source), run on Fashion-MNIST's IDX files.

The published weights of these projects cannot be fetched here: the nets get seeded random weights
saved by pycaffe, which leave the arithmetic the same and the figures checkable."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from caffetool.data import layout
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine.locate import QUIET_GLOG
from caffetool.upgrade import upgraded
from tests.test_upgrade import bvlc, edit_cells, printed, run_notebook

CAFFETOOL = Path(sys.executable).with_name("caffetool")
PUBLIC = Path(__file__).with_name("public")
PROVENANCE = "README.md"
# What each project's Python needs that is not in caffetool's environment, by the name an import of
# it fails on: only these may keep a module of the upgraded copy from importing.
NOT_HERE = {
    "easydict": "a pip package py-faster-rcnn's config needs, not one of caffetool's dependencies",
    "nms.cpu_nms": "Cython extension built by py-faster-rcnn's lib/Makefile",
    "nms.gpu_nms": "CUDA extension built by py-faster-rcnn's lib/Makefile",
    "utils.cython_bbox": "Cython extension built by py-faster-rcnn's lib/Makefile",
    "pycocotools._mask": "Cython extension built by py-faster-rcnn's lib/Makefile",
}


def blob_id(data: bytes) -> str:
    """Git's id of a file's content (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def listed(project: str) -> dict[str, str]:
    """The files a fixture's README.md lists, with the git blob id of each as published."""
    text = (PUBLIC / project / PROVENANCE).read_text()
    return dict(re.findall(r"^\| `([^`]+)` \|(?:.*\|)? `([0-9a-f]{40})` \|$", text, re.M))


def published(tmp_path: Path, project: str) -> Path:
    """A copy of ``tests/public/PROJECT`` in ``tmp_path`` as its repository has it (without the
    fixture's README.md), for the upgrade to write its copy beside."""
    folder = tmp_path / project
    shutil.copytree(PUBLIC / project, folder,
                    ignore=lambda at, names: [PROVENANCE] if Path(at) == PUBLIC / project else [])
    return folder


@pytest.mark.parametrize("project", ["open_nsfw", "py_faster_rcnn", "deepdream"])
def test_the_fixtures_are_the_published_files_and_carry_their_licences(project):
    """Each fixture holds exactly the files its README.md lists, each with the git blob id it has in
    the named commit (so it is the published file, byte for byte), and a licence file among them."""
    files = listed(project)
    here = {str(p.relative_to(PUBLIC / project)) for p in (PUBLIC / project).rglob("*") if p.is_file()
            and "__pycache__" not in p.parts}
    assert here - {PROVENANCE} == set(files)
    assert {name: blob_id((PUBLIC / project / name).read_bytes()) for name in files} == files
    assert any(Path(name).stem.lower() == "license" for name in files)


def seeded_random_weights(caffe, deploy: Path, out: Path) -> None:
    """A stand-in for a project's published weights, which cannot be fetched here: He-normal random
    weights (seed 0) for convolutions and inner products, and batch normalisation and scale layers
    that pass their input through (mean 0, variance 1, scale 1, shift 0), saved by pycaffe.

    Untrained residual blocks add up to outputs in the tens of thousands, which would make every
    probability 0 or 1 whatever the image: the last layer's weights are scaled so that its outputs
    for a seeded noise image are within 1, and the probabilities then depend on the image."""
    import numpy as np

    net = caffe.Net(str(deploy), caffe.TEST)
    kinds = {name: layer.type for name, layer in zip(net._layer_names, net.layers)}
    rng = np.random.default_rng(0)
    _random_weights(net, kinds, rng)
    last = list(net.params)[-1]
    net.blobs[net.inputs[0]].data[...] = rng.uniform(-128, 128, net.blobs[net.inputs[0]].data.shape)
    net.forward()
    net.params[last][0].data[...] /= np.abs(net.blobs[net.top_names[last][0]].data).max()
    net.save(str(out))


def _random_weights(net, kinds: dict[str, str], rng) -> None:
    import numpy as np

    for name, blobs in net.params.items():
        if kinds[name] == "BatchNorm":
            blobs[0].data[...], blobs[1].data[...], blobs[2].data[...] = 0, 1, 1
        elif kinds[name] == "Scale":
            blobs[0].data[...] = 1
            if len(blobs) > 1:
                blobs[1].data[...] = 0
        else:
            weights = blobs[0].data
            weights[...] = rng.normal(0, np.sqrt(2 / np.prod(weights.shape[1:])), weights.shape)
            if len(blobs) > 1:
                blobs[1].data[...] = 0


def photos(folder: Path) -> list[Path]:
    """Real photographs as JPEG files: scikit-image's astronaut (512x512) and coffee (400x600)."""
    from PIL import Image
    from skimage import data

    paths = []
    for name in ("astronaut", "coffee"):
        paths.append(folder / f"{name}.jpg")
        Image.fromarray(getattr(data, name)()).save(paths[-1], quality=90)
    return paths


def nsfw_reference(caffe, deploy: Path, weights: Path, photo: Path) -> float:
    """open_nsfw's score for ``photo`` computed here with pycaffe, its preprocessing written out:
    Pillow's RGB image resized to 256x256 bilinearly and re-encoded as JPEG (as its training data
    was), decoded to [0, 1], its centre 224x224 taken, channels first in BGR order, scaled to
    [0, 255] less the per-channel mean (104, 117, 123); the score is ``prob[1]``."""
    import io

    import numpy as np
    from PIL import Image

    resized = io.BytesIO()
    Image.open(photo).convert("RGB").resize((256, 256), resample=Image.BILINEAR).save(resized, format="JPEG")
    resized.seek(0)
    image = np.asarray(Image.open(resized), dtype=np.float32) / np.float32(255)
    crop = image[16:240, 16:240]
    mean = np.array([104, 117, 123], dtype=np.float32)[:, None, None]
    blob = crop.transpose(2, 0, 1)[::-1] * np.float32(255) - mean
    net = caffe.Net(str(deploy), str(weights), caffe.TEST)
    net.blobs["data"].data[...] = blob
    return float(net.forward()["prob"][0, 1])


@pytest.mark.engine
def test_open_nsfw_upgraded_classifies_photos_as_pycaffe_does(engine, caffe, tmp_path):
    """open_nsfw upgraded as a folder by ``caffetool upgrade`` (its script and its net), then its
    ``classify_nsfw.py`` run unedited with Python 3 and the engine's pycaffe on real photos (read as
    bytes, resized by Pillow through an in-memory file, cropped at integer offsets): the score it
    prints for each equals the one computed here with the same preprocessing written out
    (:func:`nsfw_reference`), to 1e-5. The published weights cannot be fetched here: both use the same
    seeded random weights for its ResNet-50 (:func:`seeded_random_weights`)."""
    project = published(tmp_path, "open_nsfw")
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    copy = tmp_path / "open_nsfw-upgraded"
    deploy = copy / "nsfw_model" / "deploy.prototxt"
    weights = tmp_path / "random_nsfw.caffemodel"
    seeded_random_weights(caffe, deploy, weights)
    env = {**os.environ, **QUIET_GLOG, "PYTHONPATH": str(engine.python_path)}
    for photo in photos(tmp_path):
        run = subprocess.run([sys.executable, str(copy / "classify_nsfw.py"), "--model_def", str(deploy),
                              "--pretrained_model", str(weights), str(photo)], capture_output=True, text=True,
                             timeout=300, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        said = re.search(r"NSFW score:\s+(\S+)", run.stdout)
        assert said, run.stdout
        expected = nsfw_reference(caffe, deploy, weights, photo)
        assert abs(float(said.group(1)) - expected) <= 1e-5, (photo.name, said.group(1), expected)


def plain_2to3(folder: Path) -> Path:
    """A copy of ``folder`` converted by plain 2to3 (fissix with its own fixers only, ``python -m
    fissix -w``)."""
    copy = folder.with_name(folder.name + "-2to3")
    shutil.copytree(folder, copy)
    done = subprocess.run([sys.executable, "-m", "fissix", "-w", "-n", "--no-diffs", "."], capture_output=True,
                          text=True, timeout=300, cwd=copy)
    assert done.returncode == 0, done.stderr[-2000:]
    return copy


def parses(path: Path) -> bool:
    try:
        ast.parse(path.read_text(), filename=str(path))
    except SyntaxError:
        return False
    return True


def local_imports_left(path: Path) -> list[str]:
    """Python 2's implicit relative imports left in ``path``, a module of a package: ``import x`` or
    ``from x import y`` where ``x.py`` is a file beside it (Python 3 looks for ``x`` on ``sys.path``
    instead). A script's folder is on its ``sys.path``, so scripts (``tools/``) are not concerned."""
    found = []
    if not (path.parent / "__init__.py").is_file():
        return found
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        found += [f"{path.name}:{node.lineno}: {name}" for name in names
                  if (path.parent / f"{name.split('.')[0]}.py").is_file() and path.stem != name.split(".")[0]]
    return found


@pytest.fixture(scope="module")
def faster_rcnn(tmp_path_factory) -> upgraded.UpgradeReport:
    """py-faster-rcnn as published, upgraded as a folder (once for the tests of this module)."""
    return upgraded.upgrade(published(tmp_path_factory.mktemp("public"), "py_faster_rcnn"), None, None)


def test_py_faster_rcnn_upgraded_is_python_3_in_every_file(faster_rcnn):
    """py-faster-rcnn's ``tools/`` and ``lib/`` (46 Python files) upgraded as a folder: no file is
    reported left as it was for want of converting it, every file of the copy parses as Python 3
    (at least as many as of plain 2to3's copy, fissix's own fixers), a file the copy keeps as
    published is Python 3 already (``print('x'.format(y))``, ``np.sort(index)``: plain 2to3 changes
    both, the second into ``np.sort(key=cmp_to_key(index))``, which NumPy refuses), and no implicit
    relative import is left (``from voc_eval import voc_eval`` beside ``voc_eval.py`` fails on
    Python 3; 2to3 makes it ``from .voc_eval import voc_eval``)."""
    report = faster_rcnn
    project = report.source
    sources = sorted(str(p.relative_to(project)) for p in project.rglob("*.py"))
    assert len(sources) == 46
    assert [str(e) for e in report.entries if "unchanged" in str(e)] == []
    ours = [name for name in sources if parses(report.target / name)]
    plain = plain_2to3(project)
    assert ours == sources and len(ours) >= sum(parses(plain / name) for name in sources)
    kept = [name for name in sources if (report.target / name).read_bytes() == (project / name).read_bytes()]
    assert [name for name in kept if not parses(project / name)] == []
    assert [hit for name in sources for hit in local_imports_left(report.target / name)] == []


IMPORT_ALL = """
import importlib, json, sys, traceback
sys.path[:0] = [sys.argv[1], sys.argv[2]]
results = {}
for module in sys.argv[3:]:
    try:
        importlib.import_module(module)
        results[module] = None
    except ModuleNotFoundError as e:
        results[module] = ["missing", e.name]
    except BaseException as e:
        results[module] = ["error", "".join(traceback.format_exception_only(type(e), e)).strip()]
print(json.dumps(results))
"""


@pytest.mark.engine
def test_py_faster_rcnn_upgraded_lib_modules_import_on_python_3(engine, faster_rcnn, tmp_path):
    """Every module of the upgraded ``lib/`` imported by Python 3 (each in the same child, ``lib/``
    and the engine's pycaffe on its path, as ``tools/_init_paths.py`` sets it up): each imports, or
    fails only for want of something that is not here (:data:`NOT_HERE`: a pip package caffetool
    does not carry, and the Cython and CUDA extensions ``lib/Makefile`` builds). Modules with no
    such need import, among them ones whose Python 2 could not even be loaded by Python 3 (print
    statements, ``cPickle``)."""
    lib = faster_rcnn.target / "lib"
    modules = sorted(".".join(p.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
                     for p in lib.rglob("*.py") if p.name != "setup.py")
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, str(lib), str(engine.python_path), *modules],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, **QUIET_GLOG})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    failed = {m: r for m, r in results.items() if r and not (r[0] == "missing" and r[1] in NOT_HERE)}
    assert failed == {}
    imported = {m for m, r in results.items() if r is None}
    assert {"utils.blob", "utils.timer", "fast_rcnn.bbox_transform", "nms.py_cpu_nms", "rpn.generate_anchors",
            "datasets.ds_utils", "datasets.voc_eval", "datasets.tools.mcg_munge"} <= imported, results


def module_of(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"public_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_py_faster_rcnn_upgraded_blob_and_box_functions_compute_their_figures(faster_rcnn):
    """Functions of the upgraded ``lib/`` run on Python 3 with inputs made here, against the same
    computation written out with NumPy and OpenCV: ``prep_im_for_blob`` (mean subtracted, shorter
    side scaled to 600 unless the longer would pass 1000) and ``im_list_to_blob`` (zero-padded,
    channels first) on real photos, exactly; ``bbox_transform`` (the regression targets of boxes
    against ground truth) and ``bbox_transform_inv`` (its inverse) on random boxes, to float64's
    rounding, the inverse giving back the ground truth with its far corner a pixel further (its widths
    count both end pixels, its inverse's corners do not: py-faster-rcnn's own convention);
    ``unique_boxes`` on boxes with repeats, the first index of each distinct box in order."""
    import cv2
    import numpy as np
    from skimage import data

    copy = faster_rcnn.target
    blob = module_of(copy / "lib" / "utils" / "blob.py")
    boxes = module_of(copy / "lib" / "fast_rcnn" / "bbox_transform.py")
    means = np.array([[[102.9801, 115.9465, 122.7717]]])  # py-faster-rcnn's cfg.PIXEL_MEANS
    images = [np.ascontiguousarray(data.astronaut()[:, :, ::-1]), np.ascontiguousarray(data.coffee()[:, :, ::-1])]
    prepared = []
    for image, size in zip(images, (600, 600)):
        got, scale = blob.prep_im_for_blob(image.copy(), means, size, 1000)
        expected_scale = size / min(image.shape[:2])
        if round(expected_scale * max(image.shape[:2])) > 1000:
            expected_scale = 1000 / max(image.shape[:2])
        expected = cv2.resize((image - means).astype(np.float32), None, None, fx=expected_scale,
                              fy=expected_scale, interpolation=cv2.INTER_LINEAR)
        assert scale == expected_scale and np.array_equal(got, expected)
        prepared.append(got)
    stacked = blob.im_list_to_blob(prepared)
    tall, wide = max(p.shape[0] for p in prepared), max(p.shape[1] for p in prepared)
    assert stacked.shape == (2, 3, tall, wide)
    for i, p in enumerate(prepared):
        assert np.array_equal(stacked[i, :, :p.shape[0], :p.shape[1]], p.transpose(2, 0, 1))
        assert not stacked[i, :, p.shape[0]:, :].any() and not stacked[i, :, :, p.shape[1]:].any()

    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 400, (50, 2))
    ex = np.hstack([corners, corners + rng.uniform(10, 200, (50, 2))])
    gt = ex + rng.normal(0, 8, ex.shape)
    gt[:, 2:] = np.maximum(gt[:, 2:], gt[:, :2] + 2)
    ew, eh = ex[:, 2] - ex[:, 0] + 1, ex[:, 3] - ex[:, 1] + 1
    gw, gh = gt[:, 2] - gt[:, 0] + 1, gt[:, 3] - gt[:, 1] + 1
    expected = np.stack([(gt[:, 0] + gw / 2 - ex[:, 0] - ew / 2) / ew, (gt[:, 1] + gh / 2 - ex[:, 1] - eh / 2) / eh,
                         np.log(gw / ew), np.log(gh / eh)], axis=1)
    targets = boxes.bbox_transform(ex, gt)
    assert np.allclose(targets, expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(boxes.bbox_transform_inv(ex, targets), gt + [0, 0, 1, 1], rtol=0, atol=1e-9)

    repeated = np.round(ex[[0, 1, 0, 2, 1, 3, 3, 4]])
    unique = module_of(copy / "lib" / "datasets" / "ds_utils.py").unique_boxes(repeated)
    assert unique.tolist() == [0, 1, 3, 5, 7]


def test_py_faster_rcnn_upgraded_anchors_are_the_ones_its_source_lists(faster_rcnn):
    """The upgraded ``generate_anchors()`` (its sizes are divisions) gives the nine anchors that
    ``lib/rpn/generate_anchors.py`` lists in its own comment from the MATLAB implementation it was
    checked against, each corner one less (MATLAB counts pixels from 1, NumPy from 0)."""
    import numpy as np

    anchors = module_of(faster_rcnn.target / "lib" / "rpn" / "generate_anchors.py").generate_anchors()
    assert np.array_equal(anchors, np.array([[-83, -39, 100, 56], [-175, -87, 192, 104], [-359, -183, 376, 200],
                                    [-55, -55, 72, 72], [-119, -119, 136, 136], [-247, -247, 264, 264],
                                    [-35, -79, 52, 96], [-79, -167, 96, 184], [-167, -343, 184, 360]]) - 1)


VOC_OBJECT = ("<object><name>{}</name><pose>Unspecified</pose><truncated>0</truncated><difficult>{}</difficult>"
              "<bndbox><xmin>{}</xmin><ymin>{}</ymin><xmax>{}</xmax><ymax>{}</ymax></bndbox></object>")
# image: (class, difficult, box) of each object annotated in it.
VOC_TRUTH = {"img1": [("cat", 0, (10, 10, 50, 50)), ("cat", 0, (100, 100, 150, 150)), ("dog", 0, (0, 0, 20, 20))],
             "img2": [("cat", 0, (30, 30, 80, 80)), ("cat", 1, (200, 200, 240, 240))]}
# Cat detections, best first: a hit, a miss, a second hit on the same cat (counted as false), a hit,
# a hit on a difficult cat (counted as neither), a miss.
VOC_DETECTIONS = ["img1 0.9 10 10 50 50", "img2 0.8 0 0 5 5", "img1 0.7 11 11 50 50", "img2 0.6 30 30 80 80",
                  "img2 0.5 200 200 240 240", "img1 0.4 300 300 310 310"]


def test_py_faster_rcnn_upgraded_voc_eval_scores_detections_as_pascal_voc_does(faster_rcnn, tmp_path):
    """The upgraded ``voc_eval()`` (PASCAL VOC's average precision: annotations read from VOC XML
    files and cached with pickle, detections from a text file) on a small set made here whose
    figures are worked out by hand: three cats to find (a fourth is difficult), six detections
    (:data:`VOC_DETECTIONS`), so recall 1/3, 1/3, 1/3, 2/3, 2/3, 2/3, precision 1, 1/2, 1/3, 1/2,
    1/2, 2/5, and an average precision of 0.5 by the area under the curve and by VOC 2007's eleven
    points alike. Run twice: the first call writes the cache, the second reads it back."""
    import numpy as np

    for image, objects in VOC_TRUTH.items():
        body = "".join(VOC_OBJECT.format(name, difficult, *box) for name, difficult, box in objects)
        (tmp_path / f"{image}.xml").write_text(f"<annotation><filename>{image}.jpg</filename>{body}</annotation>")
    (tmp_path / "images.txt").write_text("".join(f"{image}\n" for image in VOC_TRUTH))
    (tmp_path / "det_cat.txt").write_text("".join(f"{line}\n" for line in VOC_DETECTIONS))
    voc = module_of(faster_rcnn.target / "lib" / "datasets" / "voc_eval.py")
    for use_07_metric in (False, True):
        rec, prec, ap = voc.voc_eval(str(tmp_path / "det_{}.txt"), str(tmp_path / "{}.xml"),
                                     str(tmp_path / "images.txt"), "cat", str(tmp_path / "cache"),
                                     use_07_metric=use_07_metric)
        assert np.allclose(rec, [1 / 3, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3])
        assert np.allclose(prec, [1, 1 / 2, 1 / 3, 1 / 2, 1 / 2, 2 / 5])
        assert abs(ap - 0.5) < 1e-12
    assert (tmp_path / "cache" / "annots.pkl").is_file()


@pytest.mark.engine
def test_bvlcs_siamese_notebook_upgraded_runs_on_fashion_mnist_idx_files(engine, caffe, fashion_data, tmp_path):
    """BVLC's ``examples/siamese`` (its notebook reads IDX files with ``np.fromstring``, which NumPy 2
    refuses for bytes) upgraded as a folder, then ``mnist_siamese.ipynb`` run by ``caffetool
    notebook.run`` on Fashion-MNIST's test files where it expects MNIST's (``data/mnist/t10k-*``) and
    seeded random weights where it expects its trained ones (not fetchable here), no cell edited:
    every cell runs, and the 2-D features it computes for the first images equal pycaffe's on the
    same IDX bytes read here with ``np.frombuffer`` and scaled by 1/256, to 1e-5."""
    import gzip

    import numpy as np

    root = bvlc(tmp_path, "examples/siamese")
    siamese = root / "examples" / "siamese"
    (root / "data" / "mnist").mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        raw = layout.raw_dir(FASHION_MNIST) / f"{name}.gz"
        (root / "data" / "mnist" / name).write_bytes(gzip.decompress(raw.read_bytes()))
    weights = siamese / "mnist_siamese_iter_50000.caffemodel"
    seeded_random_weights(caffe, siamese / "mnist_siamese.prototxt", weights)
    report = upgraded.upgrade(siamese, None, engine)
    notebook = report.target / "mnist_siamese.ipynb"
    edit_cells(notebook, {}, {"out = net.forward_all": "import json; print('SIAMESE_FEAT', json.dumps(out['feat'][:5]"
                                                          ".tolist()))"})
    said = printed(run_notebook(notebook, report.target))
    features = np.array(json.loads(re.search(r"SIAMESE_FEAT (.*)", said).group(1)))
    pixels = (root / "data" / "mnist" / "t10k-images-idx3-ubyte").read_bytes()[16:16 + 5 * 28 * 28]
    net = caffe.Net(str(siamese / "mnist_siamese.prototxt"), str(weights), caffe.TEST)
    net.blobs["data"].reshape(5, 1, 28, 28)
    net.blobs["data"].data[...] = np.frombuffer(pixels, dtype=np.uint8).reshape(5, 1, 28, 28) * 0.00390625
    expected = net.forward()["feat"]
    assert features.shape == (5, 2) and np.allclose(features, expected, rtol=0, atol=1e-5), (features, expected)


@pytest.mark.engine
def test_deepdream_notebook_upgraded_runs_every_cell(engine, caffe, tmp_path):
    """Google's ``dream.ipynb`` (nbformat 3, ``cStringIO`` images shown through PIL, ``xrange``,
    print statements) upgraded as a folder by ``caffetool upgrade``, then run top to bottom by
    ``caffetool notebook.run``: every cell runs, the dream frames are written as photos of the input's
    size and the last dream prints its octave, step, layer and shape. Stand-ins for what cannot be
    fetched here: seeded random weights for BVLC's GoogLeNet, scikit-image's coffee and astronaut
    photos for the repository's sky and flowers. The cells are edited only to point at the local
    GoogLeNet and to do less on two cores: 2 octaves of 2 steps (not 4 of 10), 2 frames (not 100)."""
    from PIL import Image
    from skimage import data

    project = published(tmp_path, "deepdream")
    googlenet = bvlc(tmp_path, "models/bvlc_googlenet") / "models" / "bvlc_googlenet"
    seeded_random_weights(caffe, googlenet / "deploy.prototxt", googlenet / "bvlc_googlenet.caffemodel")
    Image.fromarray(data.coffee()).save(project / "sky1024px.jpg")
    Image.fromarray(data.astronaut()).resize((224, 224)).save(project / "flowers.jpg")
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    copy = tmp_path / "deepdream-upgraded"
    edit_cells(copy / "dream.ipynb", {"'../caffe/models/bvlc_googlenet/'": repr(f"{googlenet}/"),
                                      "iter_n=10, octave_n=4": "iter_n=2, octave_n=2", "range(100)": "range(2)",
                                      "frames/0029.jpg": "frames/0001.jpg"}, {})
    book = run_notebook(copy / "dream.ipynb", copy)
    last = [c for c in book["cells"] if c["cell_type"] == "code"][-1]
    said = "".join("".join(o.get("text", "")) for o in last["outputs"] if o.get("name") == "stdout")
    assert said.strip().splitlines()[-1:] == ["1 1 inception_3b/output (400, 600, 3)"], printed(book)[-1500:]
    frames = sorted((copy / "frames").iterdir())
    assert [f.name for f in frames] == ["0000.jpg", "0001.jpg"]
    assert all(Image.open(f).size == (600, 400) for f in frames)
