"""Turns whatever the user names (a zoo model, a file, a directory) into an OpGraph.

Op-graph JSON is read directly; TensorFlow graphs (GraphDef / MetaGraphDef
files, SavedModel directories, zoo models) go through the Grappler bridge:
extract a flat MetaGraphDef, then cost it for a device preset.
"""

import dataclasses
import os
from typing import Mapping, Optional

from grappler_bridge import limits

from tf_gdp import errors
from tf_gdp.cost import presets
from tf_gdp.graph import json_io
from tf_gdp.graph import op_graph

_TF_GRAPH_SUFFIXES = (".pb", ".pbtxt", ".meta", ".txt")


@dataclasses.dataclass
class LoadedGraph:
  """An op graph plus, when it came from TensorFlow, its flat MetaGraphDef."""
  graph: op_graph.OpGraph
  extracted: Optional[object] = None  # grappler_bridge.extract.ExtractedGraph
  # The signature it was flattened from, when it came from a SavedModel.
  saved_model_signature: Optional[str] = None


def load(path: str, *, devices: str = presets.DEFAULT, signature: str =
         "serving_default", cross_check: bool = False) -> LoadedGraph:
  """Loads an op-graph JSON file, a GraphDef/MetaGraphDef file or a SavedModel."""
  if os.path.isdir(path):
    from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
    extracted = extract.from_saved_model(path, signature)
  elif path.endswith(".json"):
    return LoadedGraph(json_io.load_json(path))
  elif path.endswith(_TF_GRAPH_SUFFIXES):
    limits.check_size(path)  # before the slow TensorFlow import
    from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
    extracted = extract.from_graph_file(path)
  elif not os.path.exists(path):
    raise errors.GraphLoadError(f"{path}: no such file or directory")
  else:
    raise errors.GraphLoadError(
        f"{path}: unknown graph file type (expected .json, .pb, .pbtxt or a "
        "SavedModel directory)")
  name = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
  return LoadedGraph(cost(extracted, name=name, devices=devices,
                          cross_check=cross_check), extracted,
                     signature if os.path.isdir(path) else None)


def load_model(model: str, *, knobs: str = "", devices: str = presets.DEFAULT,
               cross_check: bool = False) -> LoadedGraph:
  """Builds a zoo model's training step and costs it for `devices`."""
  from tf_gdp import zoo  # pylint: disable=g-import-not-at-top
  presets.kind_hardware(devices)  # fail fast on a bad preset, before building
  parsed = zoo.parse_knobs(knobs, model) if knobs else {}
  extracted = zoo.extract(model, **parsed)
  graph = cost(extracted, name=model, devices=devices, cross_check=cross_check,
               metadata={"model": model, "knobs": parsed})
  return LoadedGraph(graph, extracted)


def cost(extracted, *, name: str, devices, cross_check: bool = False,
         metadata: Optional[dict] = None,
         pinned: Optional[Mapping[str, str]] = None) -> op_graph.OpGraph:
  """Costs an extracted TF graph for a device preset and builds the OpGraph.

  Args:
    extracted: the flat graph (`grappler_bridge.extract.ExtractedGraph`).
    name: the graph's name.
    devices: a preset name or topology file, or a `Topology` built in code;
      its `hardware` prices each device kind.
    cross_check: also run Grappler's analytical model (see `costs`).
    metadata: more metadata for the graph.
    pinned: node name -> TF device string the placer must keep.
  """
  from grappler_bridge import costs  # pylint: disable=g-import-not-at-top
  if isinstance(devices, str):
    hardware, label = presets.kind_hardware(devices), devices
  else:
    hardware, label = presets.topology_hardware(devices), devices.name
  document = costs.op_graph_document(
      extracted, hardware, name=name, pinned=pinned, cross_check=cross_check)
  document.setdefault("metadata", {}).update(
      {"devices": label, **(metadata or {})})
  return json_io.from_document(document)
