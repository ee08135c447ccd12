"""`tf-gdp export-graph`: a zoo model or user graph as MetaGraphDef or op-graph JSON.

Examples:
  tf-gdp export-graph --model=inception_v3 --out=i.json
  tf-gdp export-graph --model=gnmt --knobs=num_layers=4 --out=g.pb
  tf-gdp export-graph --graph=my_model/ --devices=v100x8 --out=m.json
"""

from absl import flags

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.cli import graph_flags
from tf_gdp.cost import presets
from tf_gdp.graph import json_io

_MODEL = flags.DEFINE_string("model", None, "Zoo model to build (e.g. inception_v3, gnmt).")
_KNOBS = flags.DEFINE_string("knobs", "", "Model size knobs, e.g. 'batch=8,num_layers=4'.")
_GRAPH = flags.DEFINE_string(
    "graph", None, "A user graph instead of --model: GraphDef/MetaGraphDef "
    "(.pb/.pbtxt), SavedModel directory, or op-graph .json.")
_SIGNATURE = graph_flags.define_signature(__name__)
_INPUT_SHAPES = graph_flags.define_input_shapes(__name__)
_DEVICES = flags.DEFINE_string(
    "devices", presets.DEFAULT, "Device preset whose hardware prices the op "
    f"costs in JSON output ({', '.join(presets.names())}).")
_OUT = flags.DEFINE_string(
    "out", None, "Output file: .json writes op-graph JSON with costs; "
    ".pb / .pbtxt writes the flat MetaGraphDef.", required=True)
_CROSS_CHECK = flags.DEFINE_bool(
    "cross_check", False, "Also price ops with Grappler's analytical model and "
    "record the comparison in the JSON metadata.")


def main(argv):
  del argv
  if (_MODEL.value is None) == (_GRAPH.value is None):
    raise errors.InputError("give exactly one of --model or --graph")
  out = _OUT.value
  if not out.endswith((".json", ".pb", ".pbtxt")):
    raise errors.InputError(f"--out={out}: must end in .json, .pb or .pbtxt")
  if _MODEL.value is not None:
    loaded = graph_specs.load_model(_MODEL.value, knobs=_KNOBS.value,
                                    devices=_DEVICES.value,
                                    cross_check=_CROSS_CHECK.value)
  else:
    loaded = graph_specs.load(_GRAPH.value, devices=_DEVICES.value,
                              signature=_SIGNATURE.value,
                              input_shapes=_INPUT_SHAPES.value,
                              cross_check=_CROSS_CHECK.value)
  if out.endswith(".json"):
    json_io.save_json(loaded.graph, out)
  else:
    if loaded.extracted is None:
      raise errors.InputError(
          "an op-graph JSON input has no TensorFlow graph to write as "
          f"{out}; use a .json output")
    from grappler_bridge import graph_io  # pylint: disable=g-import-not-at-top
    fileio.write_atomically(
        out, graph_io.serialize_meta_graph(loaded.extracted.meta_graph, out))
  print(f"wrote {out}: {loaded.graph.num_nodes} nodes, "
        f"{loaded.graph.num_edges} edges")
