"""Training with the real ``caffe`` binary: run directories, the runner, log parsing, plots, reports."""
