"""The one way in for graphs: a graph spec becomes `GraphSpec`s, each loads.

A graph spec is a comma-separated list of items:

  gnmt2, rnnlm2:batch=8:num_layers=2   zoo models with optional knobs
  zoo                                  every benchmark model of the zoo
  my_graph.json, graphs/*.pb           op-graph JSON, GraphDef / MetaGraphDef
                                       files, SavedModel directories, globs
  layered:N[:width=W][:seed=S]         generated graphs (`graph.generators`)
  cells:N[:cell=C][:seed=S]
  branches:N[:k=K][:seed=S]
  corpus:train, corpus:eval, ...       corpus graphs (`corpus.graph_sets`),
                                       built and cached on first use

With `allow_devices` (pre-training on several topologies) any item may end
in `@DEVICES` (`branches:80@cpu-workers:2`): it is then meant for that
topology only. `GraphSpec.load(devices)` builds or reads the graph and costs
it for a device preset, giving a `LoadedGraph`: the op graph plus, for a
TensorFlow graph, its flat MetaGraphDef (which measuring and writing the
placed graph need).
"""

import dataclasses
import glob
import os
from typing import List, Mapping, Optional

from grappler_bridge import limits

from tf_gdp import errors
from tf_gdp import zoo
from tf_gdp.corpus import families
from tf_gdp.corpus import graph_sets
from tf_gdp.corpus import store
from tf_gdp.cost import presets
from tf_gdp.graph import generators
from tf_gdp.graph import json_io
from tf_gdp.graph import op_graph

ZOO = "zoo"  # the spec item meaning every benchmark model of the zoo
_TF_GRAPH_SUFFIXES = (".pb", ".pbtxt", ".meta", ".txt")


@dataclasses.dataclass
class LoadedGraph:
  """An op graph plus, when it came from TensorFlow, its flat MetaGraphDef."""
  graph: op_graph.OpGraph
  extracted: Optional[object] = None  # grappler_bridge.extract.ExtractedGraph
  # The signature it was flattened from, when it came from a SavedModel.
  saved_model_signature: Optional[str] = None


@dataclasses.dataclass
class GraphSpec:
  """One graph of a spec: a zoo model, a file, a generated or corpus graph.

  Exactly one of `model`, `path`, `generator` and `corpus` (a corpus
  variant's name, built and cached on demand) is set. `devices` is the
  item's own topology (the `@DEVICES` suffix), if it has one. `signature`
  is the SavedModel signature to flatten (None: the model's default).
  """
  label: str
  model: Optional[str] = None
  knobs: str = ""
  path: Optional[str] = None
  generator: Optional[str] = None
  options: Optional[dict] = None
  devices: Optional[str] = None
  signature: Optional[str] = None
  corpus: Optional[str] = None
  input_shapes: Optional[str] = None

  def load(self, devices: str) -> LoadedGraph:
    """Builds, reads or generates the graph, costed for preset `devices`."""
    if self.input_shapes and self.path is None:
      raise errors.InputError(
          f"--input_shapes applies to graph files and SavedModels; "
          f"{self.label!r} has fixed shapes")
    if self.corpus is not None:
      built = store.ensure([families.VARIANTS[self.corpus]], devices)
      return LoadedGraph(json_io.load_json(built[0].path))
    if self.model is not None:
      return load_model(self.model, knobs=self.knobs, devices=devices)
    if self.path is not None:
      return load(self.path, devices=devices, signature=self.signature,
                  input_shapes=self.input_shapes)
    return LoadedGraph(generators.generate(self.generator, self.options,
                                           label=self.label))


def parse(spec: str, *, allow_devices: bool = False,
          signature: Optional[str] = None,
          input_shapes: Optional[str] = None) -> List[GraphSpec]:
  """Parses a graph spec (module doc); InputError on a bad item.

  `GRAPH@DEVICES` items are only accepted with `allow_devices` (pre-training
  on several topologies); elsewhere the command's --devices decides.
  `signature` applies to every SavedModel of the spec, `input_shapes`
  (`grappler_bridge.input_shapes`) to every graph file and SavedModel.
  """
  generated, others = [], []
  for entry in [s.strip() for s in spec.split(",") if s.strip()]:
    item, at, devices = entry.partition("@")
    if at and not allow_devices:
      raise errors.InputError(f"{entry!r}: GRAPH@DEVICES is for pretrain; "
                              "this command places on its --devices")
    if at and not (item and devices):
      raise errors.InputError(f"{entry!r}: use GRAPH@DEVICES, e.g. "
                              "branches:80@cpu-workers:2")
    name, _, options = item.partition(":")
    if name in generators.GENERATORS:
      new = [GraphSpec(label=item.replace(":", "_").replace("=", ""),
                       generator=name,
                       options=generators.parse_options(item, name, options))]
      generated += new
    else:
      new = _models_and_files(item, signature)
      others += new
    for made in new:
      made.input_shapes = input_shapes
    if at:
      for done in new:
        done.devices = devices
        done.label += "@" + devices
  # Generated graphs first, as always: task order seeds the task draws, so
  # `make pretrain` reproduces the shipped policy only in this order.
  specs = generated + others
  if not specs:
    raise errors.InputError("the graph set names no graph")
  labels = [s.label for s in specs]
  if len(set(labels)) != len(labels):
    raise errors.InputError(f"the graph set names a graph twice: {labels}")
  return specs


def load_graph(spec: str, *, devices: str = presets.DEFAULT,
               signature: Optional[str] = None,
               input_shapes: Optional[str] = None) -> LoadedGraph:
  """Loads the one graph `spec` names (a zoo model with knobs, a file, ...).

  `gdp.load_graph("gnmt4:batch=64", devices="p100x4")`; a spec that names
  several graphs (a glob, `zoo`, a comma) is an InputError: use `parse`.
  """
  specs = parse(spec, signature=signature, input_shapes=input_shapes)
  if len(specs) != 1:
    raise errors.InputError(
        f"{spec!r} names {len(specs)} graphs ({', '.join(s.label for s in specs)})"
        "; load_graph takes one")
  return specs[0].load(devices)


def _models_and_files(item: str, signature: Optional[str]) -> List[GraphSpec]:
  """`zoo`, a zoo name with knobs (`gnmt2:batch=8`), `corpus:SELECTION`,
  a file or a glob."""
  if graph_sets.is_corpus_item(item):
    return [GraphSpec(v.name, corpus=v.name) for v in graph_sets.select(item)]
  if item == ZOO:
    return [GraphSpec(name, model=name) for name in zoo.benchmark_models()]
  name, _, knobs = item.partition(":")
  if name in zoo.MODELS:
    return [GraphSpec(item, model=name, knobs=knobs.replace(":", ","))]
  result = []
  for path in sorted(glob.glob(item)) or [item]:
    if not os.path.exists(path):
      raise errors.InputError(
          f"--graphs: {item!r} is neither a zoo model ({', '.join(zoo.list_models())}) "
          "nor an existing file")
    result.append(GraphSpec(os.path.basename(os.path.normpath(path)),
                            path=path, signature=signature))
  return result


def load(path: str, *, devices: str = presets.DEFAULT,
         signature: Optional[str] = None,
         input_shapes: Optional[str] = None,
         cross_check: bool = False) -> LoadedGraph:
  """Loads an op-graph JSON file, a GraphDef/MetaGraphDef file or a SavedModel.

  A SavedModel's `signature` None means `serving_default` if it has one,
  else its only signature. `input_shapes` ('x:32x128,mask:32x128') fixes
  the shapes of a TensorFlow graph's inputs before it is costed
  (`grappler_bridge.input_shapes`).
  """
  if input_shapes and path.endswith(".json"):
    raise errors.InputError(
        f"--input_shapes applies to graph files and SavedModels; {path} is "
        "an op graph with its shapes already fixed")
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
  if input_shapes:
    from grappler_bridge import input_shapes as input_shapes_lib  # pylint: disable=g-import-not-at-top
    try:
      input_shapes_lib.apply(extracted.graph_def,
                             input_shapes_lib.parse(input_shapes))
    except errors.InputError as e:
      raise type(e)(f"{path}: {e}") from e
  name = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
  return LoadedGraph(
      op_graph_from_extracted(extracted, name=name, devices=devices,
                              cross_check=cross_check),
      extracted, extracted.signature)


def load_model(model: str, *, knobs: str = "", devices: str = presets.DEFAULT,
               cross_check: bool = False) -> LoadedGraph:
  """Builds a zoo model's training step and costs it for `devices`."""
  presets.kind_hardware(devices)  # fail fast on a bad preset, before building
  parsed = zoo.parse_knobs(knobs, model) if knobs else {}
  extracted = zoo.extract(model, **parsed)
  graph = op_graph_from_extracted(
      extracted, name=model, devices=devices, cross_check=cross_check,
      metadata={"model": model, "knobs": parsed})
  return LoadedGraph(graph, extracted)


def op_graph_from_extracted(extracted, *, name: str, devices,
                            cross_check: bool = False,
                            metadata: Optional[dict] = None,
                            pinned: Optional[Mapping[str, str]] = None,
                            profile: Optional[Mapping[str, float]] = None,
                            profile_kind: str = "CPU"
                            ) -> op_graph.OpGraph:
  """Costs an extracted TF graph for the devices and builds the OpGraph.

  Args:
    extracted: the flat graph (`grappler_bridge.extract.ExtractedGraph`).
    name: the graph's name.
    devices: a preset name or topology file, or a `Topology` built in code;
      its `hardware` prices each device kind.
    cross_check: also run Grappler's analytical model (see `costs`).
    metadata: more metadata for the graph.
    pinned: node name -> TF device string the placer must keep.
    profile: node name -> microseconds measured on a `profile_kind` device;
      they replace that kind's roofline costs (`runtime.profiled_costs`).
    profile_kind: the device kind `profile` prices.
  """
  from grappler_bridge import costs  # pylint: disable=g-import-not-at-top
  if isinstance(devices, str):
    hardware, label = presets.kind_hardware(devices), devices
  else:
    hardware, label = presets.topology_hardware(devices), devices.name
  document = costs.op_graph_document(
      extracted, hardware, name=name, pinned=pinned, cross_check=cross_check,
      profile=profile, profile_kind=profile_kind)
  document.setdefault("metadata", {}).update(
      {"devices": label, **(metadata or {})})
  return json_io.from_document(document)
