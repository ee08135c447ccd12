"""Benchmark graphs: real TF training steps built from model code, by name.

    step, args = zoo.build("gnmt4", batch=16)      # tf.function + example args
    graph = zoo.extract("inception_v3", batch=8)   # flattened ExtractedGraph
    zoo.parse_knobs("batch=8,num_layers=2", "gnmt")  # CLI text -> typed knobs

Importing this package does not import TensorFlow; building a model does.
"""

from grappler_bridge import package_api as _package_api

from tf_gdp.zoo.registry import MODELS
from tf_gdp.zoo.registry import ModelSpec
from tf_gdp.zoo.registry import benchmark_models
from tf_gdp.zoo.registry import build
from tf_gdp.zoo.registry import check_knobs
from tf_gdp.zoo.registry import default_knobs
from tf_gdp.zoo.registry import extract
from tf_gdp.zoo.registry import list_models
from tf_gdp.zoo.registry import parse_knobs

__all__ = [
    "MODELS",
    "ModelSpec",
    "benchmark_models",
    "build",
    "check_knobs",
    "default_knobs",
    "extract",
    "list_models",
    "parse_knobs",
]

_package_api.install(
    globals(),
    modules=("amoebanet", "expert", "gnmt", "inception_v3", "lstm", "rnnlm",
             "transformer_xl", "wavenet"))
