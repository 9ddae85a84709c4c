"""AlexNet (BVLC's version): LRN before pooling, grouped conv2/4/5, dropout, 227x227 crops."""

from _imagenet import alexnet_build, ilsvrc_model

MODEL = ilsvrc_model("alexnet", "AlexNet (BVLC)", "AlexNet", alexnet_build(norm_first=True),
                     size=227, train_batch=256)
