"""Memory and compute of Caffe nets: estimated from Caffe's own allocation rules, then measured."""
