"""Colour models in the demo, fed exactly as pycaffe's ``caffe.Classifier`` feeds them.

The model is BVLC CaffeNet's deploy net as ``caffetool.nets.builders`` makes it (10 classes), with random
weights saved by pycaffe, and a 256x256 mean image written as Caffe's ``compute_image_mean`` writes
one. The photos are scikit-image's own (``chelsea``, a cat; ``coffee``, a cup), written here as PNG and
JPEG files. The reference is Caffe's code itself: ``caffe.Classifier.predict`` on the same files, its
input blob caught on its way to the net. ``caffe.io.load_image`` passes ``as_grey`` to
``skimage.io.imread``, which scikit-image 0.25 removed, so the reference reads a file with that
function's other two lines (``img_as_float(imread(path)).astype(float32)``).
"""

from __future__ import annotations

import math

import cv2
import httpx
import numpy as np
import pytest
import skimage.data
import skimage.io

from caffetool.errors import ConfigError, DataError
from caffetool.inference import caffeio, modelfiles, preprocess
from caffetool.nets import builders, declaration, transform
from caffetool.serving import classifier, grids

from .test_demo import free_port, start_server, stop

IMAGE_DIMS = (256, 256)  # CaffeNet's training images; its crops are 227x227
CLASSES = 10


def he_weights(net, rng: np.random.Generator) -> None:
    """Weights that keep activations alive through CaffeNet's eight layers (He et al. 2015's normal
    initialisation), the class scores scaled to a standard deviation of 2 so the probabilities spread."""
    for params in net.params.values():
        weights = params[0].data
        weights[...] = rng.normal(0, math.sqrt(2.0 / np.prod(weights.shape[1:])), weights.shape)
        params[1].data[...] = 0
    net.blobs["data"].data[...] = rng.uniform(-120, 120, net.blobs["data"].data.shape)
    net.forward()
    net.params["fc8"][0].data[...] *= 2.0 / net.blobs["fc8"].data.std()


@pytest.fixture(scope="module")
def colour_model(caffe, tmp_path_factory):
    """CaffeNet deploy net, weights, labels, a 256x256 mean image, and the two photos."""
    folder = tmp_path_factory.mktemp("caffenet")
    caffenet = declaration.get("caffenet")
    deploy = folder / "deploy.prototxt"
    deploy.write_text(str(builders.deploy(caffe, caffenet, builders.shape_of(caffenet, num_classes=CLASSES))))
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(15)
    he_weights(net, rng)
    net.save(str(folder / "caffenet.caffemodel"))
    (folder / "labels.txt").write_text("".join(f"class{i}\n" for i in range(CLASSES)))
    # a smooth mean image, as a data set's is, with each channel at its own level
    levels = np.array([104.0, 117.0, 123.0])[:, None, None]
    ramp = np.linspace(-20, 20, 256)
    mean = (levels + ramp[None, :, None] * np.cos(ramp / 7)[None, None, :]).astype(np.float32)
    blob = caffe.proto.caffe_pb2.BlobProto(num=1, channels=3, height=256, width=256)
    blob.data.extend(mean.ravel())
    (folder / "mean.binaryproto").write_bytes(blob.SerializeToString())
    cat, cup = skimage.data.chelsea()[:, :, ::-1], skimage.data.coffee()[:, :, ::-1]  # RGB -> OpenCV's BGR
    cv2.imwrite(str(folder / "chelsea.png"), cat)
    cv2.imwrite(str(folder / "coffee.jpg"), cup, [cv2.IMWRITE_JPEG_QUALITY, 90])
    cv2.imwrite(str(folder / "chelsea16.png"), cat.astype(np.uint16) * 257)
    return folder


def files_of(folder, **options) -> modelfiles.ModelFiles:
    return modelfiles.ModelFiles(folder / "deploy.prototxt", folder / "caffenet.caffemodel",
                                      folder / "labels.txt", mean=folder / "mean.binaryproto", **options)


@pytest.fixture(scope="module")
def ours(engine, colour_model):
    """Our classifier, for the centre crop and for ten crops."""
    return {over: classifier.load(engine, files_of(colour_model, image_dims=IMAGE_DIMS, oversample=over),
                                       validate=False) for over in (False, True)}


@pytest.fixture(scope="module")
def reference(caffe, colour_model):
    """``caffe.Classifier`` as ``python/classify.py`` makes it for CaffeNet, the mean as per-channel values
    (``examples/web_demo/app.py``'s ``mean.mean(1).mean(1)``), and the blobs it feeds the net."""
    blob = caffe.proto.caffe_pb2.BlobProto()
    blob.ParseFromString((colour_model / "mean.binaryproto").read_bytes())
    mean = caffe.io.blobproto_to_array(blob)[0].mean(1).mean(1).astype(np.float32)
    net = caffe.Classifier(str(colour_model / "deploy.prototxt"), str(colour_model / "caffenet.caffemodel"),
                           image_dims=IMAGE_DIMS, mean=mean, raw_scale=255.0, channel_swap=(2, 1, 0))
    fed: list[np.ndarray] = []
    forward_all = net.forward_all

    def caught(**blobs):
        fed.append(blobs["data"].copy())
        return forward_all(**blobs)

    net.forward_all = caught
    return net, fed


def load_image(path) -> np.ndarray:
    """``caffe.io.load_image(path)`` for a colour file, without its ``as_grey`` argument."""
    return skimage.img_as_float(skimage.io.imread(path)).astype(np.float32)


@pytest.mark.parametrize("photo,oversample", [("chelsea.png", False), ("coffee.jpg", False), ("chelsea16.png", False),
                                              ("chelsea.png", True), ("coffee.jpg", True)])
def test_the_blob_and_the_predictions_equal_caffe_classifiers(colour_model, ours, reference, photo, oversample):
    net, fed = reference
    fed.clear()
    expected = net.predict([load_image(colour_model / photo)], oversample=oversample)[0]
    model = ours[oversample]
    prepared = preprocess.prepare((colour_model / photo).read_bytes(), model.transform)
    assert prepared.blob.shape == ((10 if oversample else 1), 3, 227, 227)
    assert np.array_equal(prepared.blob, fed[0])  # bit for bit
    probs = model.probabilities(prepared.blob)
    assert np.abs(probs - expected).max() < 1e-5
    assert expected.max() < 0.99 and np.argsort(-probs)[:3].tolist() == np.argsort(-expected)[:3].tolist()
    result = model.classify((colour_model / photo).read_bytes(), top=3)
    assert result["crops"] == prepared.blob.shape[0] and result["forward_ms"] > 0
    assert [t["index"] for t in result["top"]] == np.argsort(-expected)[:3].tolist()


def test_the_two_photos_get_different_predictions(ours, colour_model):
    """A check on the test itself: the random net tells a cat from a cup."""
    model = ours[False]
    cat, cup = (model.probabilities(preprocess.prepare((colour_model / name).read_bytes(),
                                                            model.transform).blob)
                for name in ("chelsea.png", "coffee.jpg"))
    assert np.abs(cat - cup).max() > 0.01


def test_the_input_as_seen_is_the_centre_crop(ours, colour_model):
    prepared = preprocess.prepare((colour_model / "chelsea.png").read_bytes(), ours[True].transform)
    resized = caffeio.resize_image(load_image(colour_model / "chelsea.png"), IMAGE_DIMS)
    centre = resized[14:241, 14:241, ::-1] * 255  # (256 - 227) / 2 = 14.5, truncated as Caffe does
    assert prepared.seen.shape == (227, 227, 3) and np.abs(prepared.seen - centre).max() <= 0.5


def test_a_mean_file_of_the_input_size_is_subtracted_pixel_by_pixel(caffe, engine, colour_model, tmp_path):
    """A net without crop: the mean image as it is, as ``Transformer.set_mean`` takes one of the input size;
    the mean written in the ``shape`` form (``caffe.io.array_to_blobproto``) reads as the legacy one."""
    mean = np.random.default_rng(1).uniform(0, 255, (1, 3, 227, 227)).astype(np.float32)
    (tmp_path / "mean.binaryproto").write_bytes(caffe.io.array_to_blobproto(mean).SerializeToString())
    files = files_of(colour_model)
    files.mean = tmp_path / "mean.binaryproto"
    model = classifier.load(engine, files, validate=False)
    assert np.array_equal(model.transform.mean, mean[0])
    data = (colour_model / "coffee.jpg").read_bytes()
    transformer = caffe.io.Transformer({"data": (1, 3, 227, 227)})
    transformer.set_transpose("data", (2, 0, 1))
    transformer.set_channel_swap("data", (2, 1, 0))
    transformer.set_raw_scale("data", 255.0)
    transformer.set_mean("data", mean[0])
    resized = caffe.io.resize_image(load_image(colour_model / "coffee.jpg"), (227, 227))
    expected = transformer.preprocess("data", resized)
    assert np.array_equal(preprocess.prepare(data, model.transform).blob[0], expected)


def test_mean_values_channel_swap_raw_and_input_scale(caffe, engine, colour_model):
    files = files_of(colour_model, mean_values=(104.0, 117.0, 123.0), channel_swap=(0, 1, 2), raw_scale=1.0,
                     image_dims=(240, 260), scale=0.017)
    files.mean = None
    model = classifier.load(engine, files, validate=False)
    transformer = caffe.io.Transformer({"data": (1, 3, 227, 227)})
    transformer.set_transpose("data", (2, 0, 1))
    transformer.set_channel_swap("data", (0, 1, 2))
    transformer.set_raw_scale("data", 1.0)
    transformer.set_mean("data", np.array([104.0, 117.0, 123.0], np.float32))
    transformer.set_input_scale("data", 0.017)
    resized = caffeio.resize_image(load_image(colour_model / "chelsea.png"), (240, 260))
    expected = transformer.preprocess("data", resized[6:233, 16:243])
    assert np.array_equal(preprocess.prepare((colour_model / "chelsea.png").read_bytes(), model.transform).blob[0],
                          expected)


@pytest.mark.parametrize("options,message", [
    ({"channel_swap": (2, 1)}, r"^--channel-swap 2,1 is not an order of the net's 3 channels"),
    ({"image_dims": (200, 256)}, r"^--image-dims 200,256 is smaller than the net's 227x227 input"),
    ({"mean_values": (1.0, 2.0)}, r"^2 mean values for a net of 3 channels; give 1 or 3$"),
])
def test_colour_options_that_cannot_apply_are_refused(engine, colour_model, options, message):
    with pytest.raises(ConfigError, match=message):
        classifier.load(engine, files_of(colour_model, **options), validate=False)


def test_transparent_pixels_are_white_and_opaque_ones_unchanged():
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., :3] = (10, 20, 30)
    rgba[:2, :, 3] = 255
    rgb = caffeio.rgb_float(rgba)
    assert np.array_equal(rgb[:2], np.broadcast_to(skimage.img_as_float(np.uint8([30, 20, 10])).astype(np.float32),
                                                   (2, 4, 3)))
    assert np.array_equal(rgb[2:], np.ones((2, 4, 3), np.float32))


def test_a_photo_over_the_exact_limit_is_shrunk_first(ours, colour_model, monkeypatch):
    """Past ``EXACT_PIXELS`` a whole-factor area shrink comes first: close to Caffe's result, not equal.

    The photo is the cat enlarged four times (1200x1804); the limit set to a quarter of that makes
    the factor 2. Figures on 0..255 pixel values."""
    cat = cv2.imread(str(colour_model / "chelsea.png"))
    data = cv2.imencode(".png", cv2.resize(cat, None, fx=4, fy=4, interpolation=cv2.INTER_CUBIC))[1].tobytes()
    exact = preprocess.prepare(data, ours[False].transform).blob
    monkeypatch.setattr(caffeio, "EXACT_PIXELS", 1200 * 1804 // 4)
    shrunk = preprocess.prepare(data, ours[False].transform).blob
    difference = np.abs(shrunk - exact)
    assert 0 < difference.mean() < 1 and difference.max() < 10


def test_per_channel_means_of_a_full_size_mean(caffe, colour_model):
    pb2 = caffe.proto.caffe_pb2
    full = transform.read_mean(pb2, colour_model / "mean.binaryproto", 3, 256, 256)
    crop = transform.read_mean(pb2, colour_model / "mean.binaryproto", 3, 227, 227)
    assert full.shape == (3, 256, 256) and full.dtype == np.float32
    assert crop.shape == (3,) and np.array_equal(crop, full.astype(np.float64).mean(1).mean(1).astype(np.float32))
    with pytest.raises(DataError, match=r"has shape \(3, 256, 256\); the net takes 1 channel\(s\): give 1 values "
                                        r"or a 1xHxW image$"):
        transform.read_mean(pb2, colour_model / "mean.binaryproto", 1, 28, 28)


def test_demo_serve_answers_for_a_colour_model(colour_model, ours):
    port = free_port()
    folder = colour_model
    child = start_server(["--deploy", str(folder / "deploy.prototxt"), "--weights", str(folder / "caffenet.caffemodel"),
                          "--labels", str(folder / "labels.txt"), "--mean", str(folder / "mean.binaryproto"),
                          "--image-dims", "256,256", "--oversample"], port)
    try:
        assert child.poll() is None, child.stderr.read()
        base = f"http://127.0.0.1:{port}"
        model = httpx.get(f"{base}/api/model").json()
        assert model["input_shape"] == [1, 3, 227, 227]
        assert model["colour"]["image_dims"] == [256, 256] and model["colour"]["oversample"] is True
        assert model["colour"]["channel_swap"] == [2, 1, 0] and model["colour"]["raw_scale"] == 255.0
        photo = (folder / "coffee.jpg").read_bytes()
        r = httpx.post(f"{base}/api/classify?top=3", content=photo, timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        expected = ours[True].classify(photo, top=3)
        assert [t["index"] for t in body["top"]] == [t["index"] for t in expected["top"]]
        assert all(abs(a["prob"] - b["prob"]) < 1e-6 for a, b in zip(body["top"], expected["top"]))
        assert body["crops"] == 10 and body["forward_ms"] > 0
    finally:
        stop(child)


def test_colour_flags_for_a_run_or_a_grey_net_are_refused(engine, trained_run):
    import subprocess
    import sys

    from .conftest import PROJECT

    refused = subprocess.run([sys.executable, "-m", "invoke", "demo.serve", "--run", str(trained_run),
                              "--mean-values", "104,117,123"], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.strip() == ("Error: only a --deploy model takes --mean-values; a run is fed with its "
                                      "own training transform")
    files = modelfiles.from_run(trained_run)
    files.oversample = True
    with pytest.raises(ConfigError, match=r"^only colour \(3-channel\) nets take --oversample; this net takes 1 "):
        classifier.load(engine, files, validate=False)


# visualizations, on the LeNet the test suite trains


@pytest.fixture(scope="module")
def lenet(engine, trained_run):
    return classifier.load(engine, modelfiles.from_run(trained_run), validate=False)


@pytest.fixture(scope="module")
def digit_png():
    image = np.zeros((28, 28), np.uint8)
    cv2.line(image, (8, 6), (20, 22), 255, 3)
    return cv2.imencode(".png", image)[1].tobytes()


def decode_png(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


def test_visualize_shows_the_first_convolution_by_default(lenet, digit_png, caffe, trained_run):
    shown = lenet.visualize(digit_png, None)
    assert shown["layer"] == "conv1" and shown["layers"] == ["conv1", "pool1", "conv2", "pool2"]
    filters, activations = decode_png(shown["filters_png"]), decode_png(shown["activations_png"])
    # 20 filters of 5x5: 5 columns, 4 rows, one-pixel lines between
    assert filters.shape == (4 * 6 - 1, 5 * 6 - 1)
    # 20 maps of 24x24 (28 - 5 + 1)
    assert activations.shape == (4 * 25 - 1, 5 * 25 - 1)
    # the tiles are the net's own conv1 output, all stretched together to 0..255
    net = caffe.Net(str(trained_run / "deploy.prototxt"), str(lenet.files.weights), caffe.TEST)
    net.blobs["data"].data[...] = preprocess.prepare(digit_png, lenet.transform).blob
    net.forward()
    conv1 = net.blobs["conv1"].data[0]
    stretched = (conv1 - conv1.min()) / (conv1.max() - conv1.min()) * 255
    for k in (0, 7, 19):
        top, left = (k // 5) * 25, (k % 5) * 25
        assert np.abs(activations[top:top + 24, left:left + 24] - stretched[k]).max() <= 1
    assert (activations[24, :] == 255).all() and (activations[:, 24] == 255).all()


def test_visualize_a_chosen_layer(lenet, digit_png):
    shown = lenet.visualize(digit_png, "conv2")
    # 50 maps of 8x8: 8 columns, 7 rows
    assert shown["layer"] == "conv2" and decode_png(shown["activations_png"]).shape == (7 * 9 - 1, 8 * 9 - 1)
    assert shown["activations_shape"] == [50, 8, 8] and shown["filters_shape"] == [20, 1, 5, 5]
    assert grids.grid_size(50, 8, 8) == (62, 71)


@pytest.mark.parametrize("layer", ["ip1", "relu1", "nonesuch"])
def test_visualize_refuses_layers_without_a_4d_output_of_their_own(lenet, digit_png, layer):
    with pytest.raises(classifier.UnknownLayer,
                       match=rf"^layer '{layer}' is not one whose output can be shown; "
                             r"choose one of: conv1, pool1, conv2, pool2$"):
        lenet.visualize(digit_png, layer)


def test_visualize_needs_the_caffe_backend(engine, trained_run, digit_png):
    opencv = classifier.load(engine, modelfiles.from_run(trained_run), "opencv", validate=False)
    with pytest.raises(classifier.NoVisualizations, match=r"^visualizations need the caffe backend"):
        opencv.visualize(digit_png, None)


def test_colour_filters_are_colour_tiles(ours, colour_model):
    shown = ours[False].visualize((colour_model / "chelsea.png").read_bytes(), "pool5")
    # 96 filters of 11x11x3: 10 columns, 10 rows; pool5 is 256 maps of 6x6: 16 x 16
    assert decode_png(shown["filters_png"]).shape == (10 * 12 - 1, 10 * 12 - 1, 3)
    assert decode_png(shown["activations_png"]).shape == (16 * 7 - 1, 16 * 7 - 1)
    assert shown["layers"] == ["conv1", "pool1", "norm1", "conv2", "pool2", "norm2", "conv3", "conv4", "conv5",
                               "pool5"]


def test_the_opencv_backend_agrees_on_ten_crops(engine, colour_model, ours):
    opencv = classifier.load(engine, files_of(colour_model, image_dims=IMAGE_DIMS, oversample=True), "opencv",
                                  validate=False)
    blob = preprocess.prepare((colour_model / "coffee.jpg").read_bytes(), opencv.transform).blob
    assert np.abs(opencv.probabilities(blob) - ours[True].probabilities(blob)).max() < 1e-4


def test_demo_classify_takes_the_colour_flags(colour_model, reference):
    import subprocess
    import sys

    from .conftest import PROJECT

    folder = colour_model
    net, _ = reference
    expected = net.predict([load_image(folder / "coffee.jpg")], oversample=True)[0]
    done = subprocess.run([sys.executable, "-m", "invoke", "demo.classify", str(folder / "coffee.jpg"),
                           "--deploy", str(folder / "deploy.prototxt"), "--weights", str(folder / "caffenet.caffemodel"),
                           "--labels", str(folder / "labels.txt"), "--mean", str(folder / "mean.binaryproto"),
                           "--image-dims", "256,256", "--oversample", "--top", "3"],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    best = np.argsort(-expected)[:3]
    assert done.stdout.strip().splitlines()[-1] == f"{folder / 'coffee.jpg'}: " + ", ".join(
        f"class{i} {expected[i]:.4f}" for i in best)


def test_a_crop_run_resizes_to_its_training_images_and_takes_its_mean(caffe, engine, colour_model, tmp_path):
    """A run of CaffeNet as caffetool trains it: TEST transform crop_size 227 and BVLC's mean values,
    on 256x256 images; the demo resizes to 256x256 and subtracts those means (BGR, after the swap)."""
    caffenet = declaration.get("caffenet")
    net = builders.train_val(caffe, caffenet, builders.shape_of(caffenet, num_classes=CLASSES),
                          builders.DataSource("train_lmdb", "test_lmdb"), 2, 2)
    (tmp_path / "train_val.prototxt").write_text(str(net))
    files = files_of(colour_model, run=tmp_path, train_size=(256, 256))
    files.mean = None
    t = classifier.load(engine, files, validate=False).transform
    assert t.colour.image_dims == (256, 256) and t.mean.tolist() == [104.0, 117.0, 123.0] and t.scale == 1.0
    files.train_size = (227, 227)  # images of the crop's size: resized to the input's
    assert classifier.load(engine, files, validate=False).transform.colour.image_dims == (227, 227)
