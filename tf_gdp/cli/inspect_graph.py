"""`tf-gdp inspect`: counts, total compute, memory and constraints of a graph.

Example:
  tf-gdp inspect --graph=i.json --top=10
"""

import json

from absl import flags

from tf_gdp import graph_specs
from tf_gdp.cli import graph_flags
from tf_gdp.cost import presets
from tf_gdp.graph import describe

_GRAPH = flags.DEFINE_string(
    "graph", None, "Op-graph .json, GraphDef/MetaGraphDef (.pb/.pbtxt) or "
    "SavedModel directory.", required=True)
_DEVICES = flags.DEFINE_string(
    "devices", presets.DEFAULT, "Device preset that prices a TF graph's ops "
    "(ignored for .json, which carries its costs).")
_TOP = flags.DEFINE_integer("top", 10, "How many of the largest ops to list.",
                            lower_bound=0)
_AS_JSON = flags.DEFINE_bool("json", False, "Print the summary as JSON.")
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)


def main(argv):
  del argv
  graph = graph_specs.load(_GRAPH.value, devices=_DEVICES.value,
                           signature=_SIGNATURE.value,
                           input_shapes=_INPUT_SHAPES.value).graph
  info = describe.summary(graph, top=_TOP.value)
  if _AS_JSON.value:
    print(json.dumps(info, indent=2))
    return
  print(describe.format_summary(info))
