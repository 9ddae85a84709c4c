"""Training with the real ``caffe`` binary: the session, the runner, devices, final tests, plots and TensorBoard."""
