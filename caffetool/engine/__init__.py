"""The Caffe engine: installing it (:mod:`.install`) and finding it (:func:`locate`)."""

from caffetool.engine.locate import EngineInfo, import_caffe, locate

__all__ = ["EngineInfo", "import_caffe", "locate"]
