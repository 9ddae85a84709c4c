"""``caffetool upgrade`` on the library calls NumPy, SciPy, scikit-image and Pillow removed (every row
of :data:`caffetool.upgrade.removed.REMOVED`, converted and run on today's library) and on Python 2's
``str`` that held bytes (:mod:`caffetool.upgrade.bytesflow`), run on a real JPEG."""

from __future__ import annotations

import hashlib
import importlib
import json
import socket
import warnings
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
from PIL import Image

from caffetool.upgrade import bytesflow, python2, upgraded
from caffetool.upgrade.fixers import fix_removed_apis
from caffetool.upgrade.removed import REMOVED, Removed

from .test_upgrade import bvlc

NP = "import numpy as np\n"
SETUP = NP + "from PIL import Image\n"


def numpy_row(row: Removed) -> tuple[str, str]:
    """A NumPy name row's Python 2 snippet and its conversion, each of which uses the name as it is."""
    old = row.old.removeprefix("numpy.")
    new = row.new if "." not in row.new else "np." + row.new.removeprefix("numpy.")
    if old in ("NaN", "Inf", "PINF", "infty"):
        use = "x = np.{} * 2\n"
    elif old in ("product", "cumproduct", "alltrue", "sometrue", "round_", "mat", "rank"):
        use = "x = np.{}(np.ones((2, 2)))\n"
    else:
        use = "x = np.zeros(2).astype(np.{})\n"
    return NP + use.format(old), NP + use.replace("np.{}", "{}").format(new)


# Each row's Python 2 snippet and exactly what the upgrade makes of it (rows not here: numpy_row).
SNIPPETS: dict[str, tuple[str, str]] = {
    "numpy.asscalar": (NP + "x = np.asscalar(np.ones(1) * 2)\n", NP + "x = (np.ones(1) * 2).item()\n"),
    "numpy.fromstring": (NP + "x = np.fromstring(np.arange(3, dtype=np.uint8).tostring(), dtype=np.uint8)\n",
                         NP + "x = np.frombuffer(np.arange(3, dtype=np.uint8).tobytes(), dtype=np.uint8)\n"),
    ".tostring": (SETUP + "x = Image.new('L', (2, 2)).tostring() + np.arange(2).tostring(order='C')\n",
                  SETUP + "x = Image.new('L', (2, 2)).tobytes() + np.arange(2).tobytes(order='C')\n"),
    "scipy.misc.imread": (SETUP + "import scipy.misc\nImage.new('RGB', (3, 2)).save('a.png')\n"
                          "x = scipy.misc.imread('a.png')\n",
                          SETUP + "import scipy.misc\nimport imageio.v2\nImage.new('RGB', (3, 2)).save('a.png')\n"
                          "x = imageio.v2.imread('a.png')\n"),
    "scipy.misc.imsave": (NP + "import scipy.misc\nscipy.misc.imsave('b.png', np.zeros((2, 2), np.uint8))\n",
                          NP + "import scipy.misc\nimport imageio.v2\n"
                          "imageio.v2.imwrite('b.png', np.zeros((2, 2), np.uint8))\n"),
    "skimage.io.imread(as_grey)": (SETUP + "import skimage.io\nImage.new('RGB', (3, 2)).save('a.png')\n"
                                   "x = skimage.io.imread('a.png', as_grey=True)\n",
                                   SETUP + "import skimage.io\nImage.new('RGB', (3, 2)).save('a.png')\n"
                                   "x = skimage.io.imread('a.png', as_gray=True)\n"),
}
for _sub, _call in (("filters", "gaussian_filter(a, 1)"), ("interpolation", "zoom(a, 2)"),
                    ("morphology", "binary_erosion(a)"), ("measurements", "label(a)"),
                    ("fourier", "fourier_shift(a, 1)")):
    _head = NP + "import scipy.ndimage\na = np.ones((4, 4))\n"
    SNIPPETS[f"scipy.ndimage.{_sub}"] = (_head + f"x = scipy.ndimage.{_sub}.{_call}\n",
                                         _head + f"x = scipy.ndimage.{_call}\n")
for _name in ("logsumexp", "comb", "factorial"):
    _args = "(np.ones(3))" if _name == "logsumexp" else "(5, 2)" if _name == "comb" else "(4)"
    SNIPPETS[f"scipy.misc.{_name}"] = (NP + f"import scipy.misc\nx = scipy.misc.{_name}{_args}\n",
                                       NP + "import scipy.misc\nimport scipy.special\n"
                                       f"x = scipy.special.{_name}{_args}\n")
for _old, _new in (("rgb2grey", "rgb2gray"), ("grey2rgb", "gray2rgb")):
    _shape = "(2, 2, 3)" if _old == "rgb2grey" else "(2, 2)"
    SNIPPETS[f"skimage.color.{_old}"] = (NP + f"import skimage.color\nx = skimage.color.{_old}(np.ones({_shape}))\n",
                                         NP + f"import skimage.color\nx = skimage.color.{_new}(np.ones({_shape}))\n")
for _old, _new in (("compare_ssim", "structural_similarity"), ("compare_psnr", "peak_signal_noise_ratio"),
                   ("compare_mse", "mean_squared_error")):
    _args = "(a, a * 0.5, data_range=1)" if _old != "compare_mse" else "(a, a * 0.5)"
    SNIPPETS[f"skimage.measure.{_old}"] = (
        NP + f"import skimage.measure\na = np.ones((8, 8))\nx = skimage.measure.{_old}{_args}\n",
        NP + "import skimage.measure\nimport skimage.metrics\na = np.ones((8, 8))\n"
        f"x = skimage.metrics.{_new}{_args}\n")
for _old, _new in (("ANTIALIAS", "LANCZOS"), ("LINEAR", "BILINEAR"), ("CUBIC", "BICUBIC")):
    SNIPPETS[f"PIL.Image.{_old}"] = (SETUP + f"x = Image.new('L', (4, 4)).resize((2, 2), Image.{_old})\n",
                                     SETUP + f"x = Image.new('L', (4, 4)).resize((2, 2), Image.{_new})\n")

# The rows a person must decide: the recipe each one's note gives, run on today's library.
RECIPES = {
    "scipy.misc.imresize": "np.array(PIL.Image.fromarray(image).resize((width, height), PIL.Image.BILINEAR))",
    "scipy.misc.toimage": "PIL.Image.fromarray(array)",
    "scipy.misc.bytescale": "((a - a.min()) * 255 / (a.max() - a.min())).round().astype(np.uint8)",
}


def library(row: Removed) -> str:
    return row.old.split(".")[0] if not row.old.startswith(".") else "numpy"


def run(code: str, folder: Path) -> dict:
    """``code`` executed in ``folder``, with deprecation warnings as errors: today's spelling, not a
    spelling on its way out."""
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.chdir(folder)
        warnings.simplefilter("error", DeprecationWarning)
        exec(compile(code, str(folder / "converted.py"), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("row", REMOVED, ids=lambda row: row.old)
def test_each_removed_api_is_converted_and_the_conversion_runs_on_todays_library(row, tmp_path):
    """The old spelling as Python 2 code wrote it becomes exactly the expected text (or, where the
    replacement behaves otherwise, stays and is reported with its recipe), and the result runs on the
    installed library, which no longer has the old spelling."""
    if row.how == "check":
        source = NP + f"import {row.old.rsplit('.', 1)[0]}\nx = {row.old}(a)\n"
        out, notes = python2.convert(source, "old.py")
        assert out == source
        reported = [n.what for n in notes if n.line == 3 and not n.changed]
        assert reported == [f"{row.old}: removed in {row.removed_in}: {row.check}"]
        assert RECIPES[row.old] in row.check
        image = np.arange(12, dtype=np.uint8).reshape(3, 4)
        namespace = {"np": np, "PIL": PIL, "image": image, "array": image, "a": image.astype(float),
                     "width": 2, "height": 5}
        result = eval(RECIPES[row.old], namespace)
        assert np.asarray(result).shape[:2] in ((5, 2), (3, 4))
        return
    source, expected = SNIPPETS[row.old] if row.old in SNIPPETS else numpy_row(row)
    out, notes = python2.convert(source, "old.py")
    assert out == expected
    assert any(n.changed and n.what.startswith("removed_apis: ") for n in notes)
    module = pytest.importorskip(library(row),
                                 reason=f"{library(row)} is not installed: {row.old} converted as text only")
    assert row.old.startswith(".") or not _has(row.old), f"{row.old} still exists in {module.__name__}"
    namespace = run(out, tmp_path)
    assert "x" in namespace or (tmp_path / "b.png").is_file()


def _has(dotted: str) -> bool:
    """Whether today's library still has ``dotted`` (a submodule still importable counts)."""
    if "(" in dotted:
        return False
    if dotted == "numpy.fromstring":  # the function stays for text; its binary mode is what went
        try:
            np.fromstring(b"\0", dtype=np.uint8)
        except ValueError:
            return False
        return True
    module, name = dotted.rsplit(".", 1)
    try:
        owner = importlib.import_module(module)
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # np.object, np.str: "will be defined" later
        present = hasattr(owner, name) and not isinstance(getattr(owner, name), type(np))
    if present:
        return not (module == "numpy" and name in ("bool", "long"))  # NumPy 2 gave these new meanings
    return False


def test_fromstring_keeps_its_text_form_and_copies_where_its_array_is_written_into():
    source = (NP + "a = np.fromstring(data, dtype=np.uint8)\na[0] = 1\nb = np.fromstring('1 2', sep=' ')\n"
              "c = np.fromstring(data, np.uint8, sep='')\ndef f(d):\n    return np.fromstring(d, np.uint8)\n")
    out, notes = python2.convert(source, "old.py")
    assert out == (NP + "a = np.frombuffer(data, dtype=np.uint8).copy()\na[0] = 1\nb = np.fromstring('1 2', sep=' ')\n"
                   "c = np.frombuffer(data, np.uint8)\ndef f(d):\n    return np.frombuffer(d, np.uint8)\n")
    left = [(n.line, n.what) for n in notes if not n.changed]
    assert left == [(6, "f() gives its argument 1 to a consumer of bytes: its callers must pass bytes "
                        "(open files 'rb')"),
                    (7, fix_removed_apis.READ_ONLY)]
    data = np.arange(3, dtype=np.uint8).tobytes()
    namespace = {"data": data}
    exec(out, namespace)
    assert list(namespace["a"]) == [1, 1, 2] and list(namespace["b"]) == [1.0, 2.0]
    with pytest.raises(ValueError, match="read-only"):
        namespace["f"](data)[0] = 1


def test_a_removed_name_imported_on_its_own_is_reported_and_a_removed_submodule_renamed():
    source = ("from scipy.misc import imresize, imread\nfrom scipy.ndimage.filters import gaussian_filter\n"
              "import scipy.ndimage.morphology\nfrom skimage.color import rgb2grey\n")
    out, notes = python2.convert(source, "old.py")
    assert out == ("from scipy.misc import imresize, imread\nfrom scipy.ndimage import gaussian_filter\n"
                   "import scipy.ndimage\nfrom skimage.color import rgb2grey\n")
    left = [(n.line, n.what.split(":")[0]) for n in notes if not n.changed]
    assert left == [(1, "scipy.misc.imread is imported by name"), (1, "scipy.misc.imresize is imported by name"),
                    (4, "skimage.color.rgb2grey is imported by name")]


def test_bvlcs_own_calls_of_removed_apis_are_converted_or_reported(tmp_path):
    """pascal_multilabel_datalayers.py's scipy.misc.imresize is reported by line;
    resize_and_crop_images.py's Image.ANTIALIAS, pycaffe io.py's as_grey and mnist_siamese's
    np.fromstring of a binary read are converted."""
    caffe = bvlc(tmp_path, "examples/pycaffe/layers", "tools/extra", "python/caffe", "examples/siamese")
    layers = caffe / "examples/pycaffe/layers/pascal_multilabel_datalayers.py"
    out, notes = python2.convert(layers.read_text(), "pascal.py")
    assert "scipy.misc.imresize(im, self.im_shape)" in out
    assert any(not n.changed and n.what.startswith("scipy.misc.imresize: removed in SciPy 1.3") for n in notes
               if out.splitlines()[n.line - 1].strip().startswith("im = scipy.misc.imresize"))
    out, _ = python2.convert((caffe / "tools/extra/resize_and_crop_images.py").read_text(), "resize.py")
    assert "img.thumbnail(box, Image.LANCZOS)" in out and "ANTIALIAS" not in out
    out, _ = python2.convert((caffe / "python/caffe/io.py").read_text(), "io.py")
    assert "skimage.io.imread(filename, as_gray=not color)" in out and "as_grey" not in out
    notebook = caffe / "examples/siamese/mnist_siamese.ipynb"
    report = upgraded.upgrade(notebook, None, None)
    cells = ["".join(c["source"]) for c in json.loads(report.target.read_text())["cells"] if c["cell_type"] == "code"]
    loading = next(c for c in cells if "TEST_DATA_FILE" in c)
    assert "raw_data = np.frombuffer(f.read(n * 28*28), dtype=np.uint8)" in loading
    assert "labels = np.frombuffer(f.read(n), dtype=np.uint8)" in loading


OLD_CLASSIFIER = '''import hashlib
import lmdb
from PIL import Image
from StringIO import StringIO
import caffe


def resize_image(data, sz=(32, 24)):
    img_data = str(data)
    im = Image.open(StringIO(img_data))
    imr = im.convert('RGB').resize(sz, resample=Image.BILINEAR)
    fh_im = StringIO()
    imr.save(fh_im, format='JPEG')
    fh_im.seek(0)
    return fh_im.read()


def classify(path, db, key):
    image_data = open(path).read()
    digest = hashlib.md5(image_data).hexdigest()
    resized = resize_image(image_data)
    image = caffe.io.load_image(StringIO(image_data))
    small = caffe.io.load_image(StringIO(resized))
    raw = str(resized)
    out = open(path + '.raw', 'w')
    out.write(image.tostring())
    out.close()
    env = lmdb.open(db)
    with env.begin(write=True) as txn:
        txn.put('%08d' % 1, raw)
        txn.put(key, raw)
    log = StringIO()
    log.write(u'done %s' % digest)
    return image, small, digest, log.getvalue()


def checksum(blob):
    return hashlib.sha1(blob).hexdigest()
'''

UPGRADED_CLASSIFIER = '''import hashlib
import lmdb
from PIL import Image
from io import BytesIO, StringIO
import caffe


def resize_image(data, sz=(32, 24)):
    img_data = bytes(data)
    im = Image.open(BytesIO(img_data))
    imr = im.convert('RGB').resize(sz, resample=Image.BILINEAR)
    fh_im = BytesIO()
    imr.save(fh_im, format='JPEG')
    fh_im.seek(0)
    return fh_im.read()


def classify(path, db, key):
    image_data = open(path, 'rb').read()
    digest = hashlib.md5(image_data).hexdigest()
    resized = resize_image(image_data)
    image = caffe.io.load_image(BytesIO(image_data))
    small = caffe.io.load_image(BytesIO(resized))
    raw = bytes(resized)
    out = open(path + '.raw', 'wb')
    out.write(image.tobytes())
    out.close()
    env = lmdb.open(db)
    with env.begin(write=True) as txn:
        txn.put(('%08d' % 1).encode(), raw)
        txn.put(key, raw)
    log = StringIO()
    log.write('done %s' % digest)
    return image, small, digest, log.getvalue()


def checksum(blob):
    return hashlib.sha1(blob).hexdigest()
'''


def test_bytes_that_python_2_kept_in_str_are_bytes_after_the_upgrade():
    out, notes = python2.convert(OLD_CLASSIFIER, "classify.py")
    assert out == UPGRADED_CLASSIFIER
    ours = [n for n in notes if n.changed and not n.what.startswith(("print", "imports", "unicode", "removed"))]
    changed = {(n.line, n.what.split(":")[0]) for n in ours}
    assert changed == {(9, "str(x) -> bytes(x)"), (10, "io.StringIO -> io.BytesIO"),
                       (12, "io.StringIO -> io.BytesIO"), (19, "open() in binary mode"),
                       (22, "io.StringIO -> io.BytesIO"), (23, "io.StringIO -> io.BytesIO"), (24, "str(x) -> bytes(x)"),
                       (25, "open() in binary mode"), (30, "LMDB key .encode()d")}
    left = {(n.line, n.what) for n in notes if not n.changed}
    assert left == {(31, "txn.put's key must be bytes: if it is text here, key.encode()"),
                    (37, "checksum() gives its argument 1 to a consumer of bytes: its callers must pass bytes "
                         "(open files 'rb')")}


def test_the_upgraded_classifier_reads_a_real_jpeg_as_decoding_the_file_does(caffe, tmp_path):
    """The converted code, run on a JPEG written by Pillow: the image it loads through the buffer
    is what ``caffe.io.load_image`` gives for the file, the resized one what Pillow's own resize and
    JPEG round trip give, the digest the file's, and LMDB holds the resized JPEG under its bytes key."""
    picture = tmp_path / "cat.jpg"
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(picture, format="JPEG")
    namespace: dict = {}
    exec(compile(UPGRADED_CLASSIFIER, "classify.py", "exec"), namespace)
    image, small, digest, log = namespace["classify"](str(picture), str(tmp_path / "db"), b"other")
    assert np.array_equal(image, caffe.io.load_image(str(picture)))
    resized = tmp_path / "small.jpg"
    Image.open(picture).convert("RGB").resize((32, 24), resample=Image.BILINEAR).save(resized, format="JPEG")
    assert np.array_equal(small, caffe.io.load_image(str(resized)))
    assert digest == hashlib.md5(picture.read_bytes()).hexdigest() and log == f"done {digest}"
    assert (tmp_path / "cat.jpg.raw").read_bytes() == image.tobytes()
    import lmdb

    with lmdb.open(str(tmp_path / "db"), readonly=True) as env, env.begin() as txn:
        assert txn.get(b"00000001") == resized.read_bytes() == txn.get(b"other")


def test_text_stays_text_and_what_cannot_be_decided_is_reported():
    """A buffer and a file of text are left as they are; an ``open`` with an encoding whose content
    must be bytes, and ``str()`` of a number where bytes are needed, are named with the choice."""
    source = ("from io import StringIO\nbuf = StringIO()\nbuf.write('a,b')\nlines = open('list.txt').read().split()\n"
              "blob = open(name, mode).read()\nprint(hash(blob))\nimport numpy as np\nimport hashlib\n"
              "x = np.frombuffer(open('w.bin', encoding='latin-1').read(), np.uint8)\n"
              "for i in range(3):\n    print(hashlib.md5(str(i)).hexdigest())\n")
    out, notes = bytesflow.bytes_flow(source)
    assert out == source
    assert notes == [bytesflow.Flow(9, "this file's content is bytes: open it in binary mode ('rb'/'wb')", False),
                     bytesflow.Flow(11, "str() goes where bytes are needed: bytes(x) if x is bytes, "
                                        "str(x).encode() if it is not", False)]


def test_a_file_given_to_pickle_or_an_image_decoder_is_opened_in_binary_mode(tmp_path):
    """``cPickle.dump(obj, open(path, 'w'))``, the ``with ... as fid`` reused for the load, and
    ``Image.open(open(path))``: each open is binary, and the converted code round-trips the data."""
    source = ("import cPickle\nfrom PIL import Image\nwith open('cache.pkl', 'w') as fid:\n"
              "    cPickle.dump({'boxes': [1, 2]}, fid, cPickle.HIGHEST_PROTOCOL)\nwith open('cache.pkl') as fid:\n"
              "    roidb = cPickle.load(fid)\nsize = Image.open(open('a.png')).size\n")
    out, notes = python2.convert(source, "cache.py")
    assert out == ("import pickle\nfrom PIL import Image\nwith open('cache.pkl', 'wb') as fid:\n"
                   "    pickle.dump({'boxes': [1, 2]}, fid, pickle.HIGHEST_PROTOCOL)\n"
                   "with open('cache.pkl', 'rb') as fid:\n"
                   "    roidb = pickle.load(fid)\nsize = Image.open(open('a.png', 'rb')).size\n")
    assert [n.line for n in notes if n.what.startswith("open() in binary mode")] == [3, 5, 7]
    Image.new("RGB", (3, 2)).save(tmp_path / "a.png")
    namespace = run(out, tmp_path)
    assert namespace["roidb"] == {"boxes": [1, 2]} and namespace["size"] == (3, 2)


def test_a_file_sent_on_a_socket_is_read_as_bytes(tmp_path):
    source = ("import socket\ndef send(path, port):\n    sock = socket.create_connection(('127.0.0.1', port))\n"
              "    sock.send(open(path).read())\n    sock.close()\n")
    out, _ = python2.convert(source, "send.py")
    assert out == source.replace("open(path)", "open(path, 'rb')")
    payload = bytes(range(256))
    (tmp_path / "blob").write_bytes(payload)
    with socket.create_server(("127.0.0.1", 0)) as server:
        namespace: dict = {}
        exec(out, namespace)
        namespace["send"](str(tmp_path / "blob"), server.getsockname()[1])
        peer, _ = server.accept()
        with peer:
            assert peer.recv(1024) == payload


def test_a_hash_updated_with_a_files_content_reads_it_as_bytes(tmp_path):
    source = ("import hashlib\ndef digest(path):\n    h = hashlib.sha256()\n    with open(path) as f:\n"
              "        h.update(f.read())\n    return h.hexdigest()\n")
    out, _ = python2.convert(source, "digest.py")
    assert out == source.replace("open(path)", "open(path, 'rb')")
    (tmp_path / "weights").write_bytes(bytes(range(256)) * 4)
    namespace: dict = {}
    exec(out, namespace)
    assert namespace["digest"](str(tmp_path / "weights")) == hashlib.sha256(bytes(range(256)) * 4).hexdigest()


def test_a_removed_call_that_cannot_be_rewritten_is_reported_and_a_positional_sep_kept():
    source = (NP + "read = np.fromstring\nx = np.asscalar(np.ones(1)).real\n"
              "y = np.fromstring('1 2', np.float32, -1, ' ')\nz = np.asscalar(a=1)\n")
    out, notes = python2.convert(source, "old.py")
    assert out == (NP + "read = np.fromstring\nx = np.ones(1).item().real\n"
                   "y = np.fromstring('1 2', np.float32, -1, ' ')\nz = np.asscalar(a=1)\n")
    assert [(n.line, n.what) for n in notes if not n.changed] == [
        (2, "np.fromstring: removed in NumPy 2.3 (its binary mode): use numpy.frombuffer"),
        (5, "np.asscalar: removed in NumPy 1.23: use a.item()")]
    namespace: dict = {}
    exec("\n".join(out.splitlines()[:4]), namespace)
    assert namespace["x"] == 1.0 and list(namespace["y"]) == [1.0, 2.0]
