"""The only code of tf-gdp that touches TensorFlow graph protos and Grappler.

It turns TF computations into flat MetaGraphDefs (`extract`), computes per-op
features and costs as an op-graph document (`costs`), and writes placements
back into graphs (`rewrite`). It never imports the learning code.
"""

from grappler_bridge import package_api as _package_api
from grappler_bridge.tf_env import prepare_tensorflow_environment

prepare_tensorflow_environment()

__all__ = ["prepare_tensorflow_environment"]

# What tf_gdp uses; the other modules are the bridge's own.
_package_api.install(
    globals(),
    modules=("costs", "errors", "export", "extract", "graph_io", "graph_view",
             "grappler_estimates", "hardware", "limits", "package_api",
             "profiling", "rewrite", "runnable", "side_effects", "tf_env",
             "unallocated_variables"))
