"""The models a server serves: a trained model loaded once (:mod:`.classifier`) or an ONNX export on
its own (:mod:`.onnxmodel`), a Triton-layout repository of them (:mod:`.repository`), each model
version with its dynamic batcher (:mod:`.batcher`) in the server's catalog (:mod:`.catalog`), and the
Prometheus series they report (:mod:`.telemetry`)."""
