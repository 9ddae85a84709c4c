"""CaffeNet (BVLC reference): AlexNet with pooling before normalisation, 227x227 crops."""

from _imagenet import alexnet_build, ilsvrc_model

MODEL = ilsvrc_model("caffenet", "CaffeNet (BVLC reference, AlexNet variant)", "CaffeNet",
                     alexnet_build(norm_first=False), size=227, train_batch=256)
