"""The only code of tf-gdp that touches TensorFlow graph protos and Grappler.

It turns TF computations into flat MetaGraphDefs (`extract`), computes per-op
features and costs as an op-graph document (`costs`), and writes placements
back into graphs (`rewrite`). It never imports the learning code.
"""

from grappler_bridge.tf_env import prepare_tensorflow_environment

prepare_tensorflow_environment()
