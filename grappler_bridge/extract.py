"""Turns TF computations into flat MetaGraphDefs with their fetches recorded.

Every placeable op must be a node of one graph: Grappler's function optimizer
inlines function calls (`PartitionedCall`) and lowers functional control flow
(`While`/`If`) to Switch/Merge/Enter/Exit/NextIteration, which is exactly what
TF's own runtime does before it places a function.

Sources: a `tf.function` with example arguments, a `ConcreteFunction`, a
SavedModel signature, or a GraphDef / MetaGraphDef file (binary or text).
"""

import dataclasses
import os
from typing import Any, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import tensorflow as tf  # pylint: disable=g-import-not-at-top
from google.protobuf import message as proto_message  # pylint: disable=g-import-not-at-top
from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import meta_graph_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
from tensorflow.python.grappler import tf_optimizer  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import limits  # pylint: disable=g-import-not-at-top

# The signature a SavedModel is read from unless another is named.
DEFAULT_SIGNATURE = "serving_default"
# Grappler reads the fetch nodes of a MetaGraphDef from this collection.
FETCH_COLLECTION = "train_op"
# Ops that mean a function call or functional control flow survived flattening.
_FUNCTIONAL_OPS = frozenset({
    "PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile",
    "If", "StatelessIf", "Case", "StatelessCase",
})


@dataclasses.dataclass
class ExtractedGraph:
  """A flat MetaGraphDef plus what is needed to run it again.

  Attributes:
    meta_graph: the flattened MetaGraphDef; its `train_op` collection lists
      the fetch nodes.
    fetches: node names whose execution is the step (outputs and side
      effects such as variable updates).
    output_names: tensor names ("node:index") of the function's outputs, in
      order (empty for graph files).
    arg_names: placeholder node names fed by the function's arguments, in
      the order of the flattened arguments.
    capture_names: placeholder node names fed by captured tensors (e.g.
      variable handles), parallel to `captured_values`.
    captured_values: the captured eager tensors / resource handles.
    capture_devices: the device each captured value lives on. The flat graph
      does not pin them (as graph ops, variables may go anywhere), but a run
      on the caller's own variables must keep each variable's ops with it.
    structured_outputs: the function's output structure, for re-packing.
    signature: the SavedModel signature it was flattened from (None when it
      did not come from a SavedModel).
  """
  meta_graph: meta_graph_pb2.MetaGraphDef
  fetches: list
  output_names: list = dataclasses.field(default_factory=list)
  arg_names: list = dataclasses.field(default_factory=list)
  capture_names: list = dataclasses.field(default_factory=list)
  captured_values: list = dataclasses.field(default_factory=list)
  capture_devices: list = dataclasses.field(default_factory=list)
  structured_outputs: Any = None
  signature: Optional[str] = None

  @property
  def graph_def(self) -> tf.compat.v1.GraphDef:
    return self.meta_graph.graph_def

  @property
  def resource_captures(self) -> frozenset:
    """The captures that are resource handles (variables): those live on a
    device. Other captured tensors are copied to wherever they are used, and
    their placeholders keep the device scope they were traced in."""
    resource = tf.resource.as_datatype_enum
    handles = {node.name for node in self.graph_def.node
               if node.op == "Placeholder"
               and node.attr["dtype"].type == resource}
    return frozenset(name for name in self.capture_names if name in handles)


def from_function(fn, *example_args, **example_kwargs) -> ExtractedGraph:
  """Traces `fn` (a tf.function or a plain Python function) and flattens it."""
  if not isinstance(fn, tf.types.experimental.PolymorphicFunction):
    fn = tf.function(fn)
  concrete = fn.get_concrete_function(*example_args, **example_kwargs)
  return from_concrete_function(concrete)


def from_concrete_function(concrete) -> ExtractedGraph:
  """Flattens a ConcreteFunction; fetches are its outputs and control outputs."""
  graph = concrete.graph
  output_names = [t.name for t in concrete.outputs]
  # Outputs in their order; control outputs (TF keeps them in a set) by
  # name, so that tracing the same function twice records the same graph.
  fetches = _unique([name.split(":")[0] for name in output_names] +
                    sorted(op.name for op in graph.control_outputs))
  if not fetches:
    raise errors.InputError("the function has no outputs and no side effects: "
                            "there is nothing to place")
  num_captures = len(concrete.captured_inputs)
  inputs = list(graph.inputs)
  arg_tensors = inputs[:len(inputs) - num_captures]
  capture_tensors = inputs[len(inputs) - num_captures:]
  graph_def = graph.as_graph_def(add_shapes=True)
  # No collections: a function has none of its own, and those a TF1
  # SavedModel's signature inherits name initializers the loader pruned
  # away (Grappler then refuses the graph).
  meta_graph = tf.compat.v1.train.export_meta_graph(
      graph_def=graph_def, graph=graph, clear_devices=False,
      collection_list=[])
  flat = flatten(meta_graph, fetches)
  return ExtractedGraph(
      meta_graph=flat,
      fetches=fetches,
      output_names=output_names,
      arg_names=[t.op.name for t in arg_tensors],
      capture_names=[t.op.name for t in capture_tensors],
      captured_values=list(concrete.captured_inputs),
      capture_devices=[getattr(v, "device", "") for v in concrete.captured_inputs],
      structured_outputs=concrete.structured_outputs)


def from_saved_model(path: str, signature: Optional[str] = None
                    ) -> ExtractedGraph:
  """Loads a SavedModel and flattens one of its signatures.

  `signature` None means `serving_default` if the model has it, else its
  only signature; a model with several and no `serving_default` needs one
  named.
  """
  if not os.path.isdir(path):
    raise errors.GraphLoadError(f"{path}: not a SavedModel directory")
  for name in ("saved_model.pb", "saved_model.pbtxt"):
    if os.path.isfile(os.path.join(path, name)):
      limits.check_size(os.path.join(path, name))
  try:
    loaded = tf.saved_model.load(path)
  except (OSError, ValueError, KeyError, TypeError, RecursionError,
          proto_message.DecodeError, tf.errors.OpError) as e:
    raise errors.GraphLoadError(
        f"{path}: cannot load SavedModel: {errors.first_line(e)}") from e
  signatures = getattr(loaded, "signatures", {})
  if signature is None:
    signature = _default_signature(path, sorted(signatures))
  if signature not in signatures:
    raise errors.GraphLoadError(
        f"{path}: no signature {signature!r} (has: {sorted(signatures) or 'none'})")
  extracted = from_concrete_function(signatures[signature])
  extracted.structured_outputs = (loaded, extracted.structured_outputs)
  extracted.signature = signature
  return extracted


def _default_signature(path: str, names: Sequence[str]) -> str:
  """`serving_default` if present, else the only signature; else an error."""
  if DEFAULT_SIGNATURE in names or not names:
    return DEFAULT_SIGNATURE  # none at all: the lookup reports it
  if len(names) == 1:
    return names[0]
  raise errors.GraphLoadError(
      f"{path}: no {DEFAULT_SIGNATURE!r} signature and several others "
      f"({', '.join(names)}); choose one with --signature=NAME")


def from_graph_file(path: str) -> ExtractedGraph:
  """Reads a GraphDef or MetaGraphDef file (.pb binary or .pbtxt text)."""
  meta_graph = read_graph_file(path)
  fetches = _collection_fetches(meta_graph)
  if not fetches:
    fetches = _signature_fetches(meta_graph) or _sink_nodes(meta_graph.graph_def)
  try:
    flat = flatten(meta_graph, fetches)
  except errors.InputError as e:
    raise type(e)(f"{path}: {e}") from e
  return ExtractedGraph(meta_graph=flat, fetches=fetches)


def read_graph_file(path: str) -> meta_graph_pb2.MetaGraphDef:
  """Parses a GraphDef/MetaGraphDef file into a MetaGraphDef, or raises.

  The file is refused by size before parsing (`limits`), and the graph must
  import into a `tf.Graph` (known ops, complete attributes, existing inputs,
  no cycles): Grappler assumes a valid graph and says little when it is not.
  """
  data = limits.read_input_file(path)
  if path.endswith((".pbtxt", ".txt")):
    meta_graph = _parse_text(path, data)
  else:
    meta_graph = _parse_binary(path, data)
  _check_importable(path, meta_graph.graph_def)
  return meta_graph


# Attributes that keep Grappler's function pass from inlining a call, so they
# are dropped: a function marked for XLA compilation (Keras's grouped and
# depthwise convolutions are one) becomes the ops XLA would have fused, each
# placeable; a function that names the API it implements (Keras's LSTM and
# GRU layers, which leave cuDNN or the plain loop to Grappler's
# implementation selector) becomes the implementation the trace chose.
_NO_INLINE_ATTRIBUTES = ("_XlaMustCompile", "_noinline", "api_implements")
# Functional control flow that Grappler lowers only when this attribute is
# true. `tf.while_loop` and `tf.cond` set it; ops built directly, as
# `tf.nn.ctc_loss`'s scans build their `While`, do not, and would stay
# functional (unplaceable as one node).
_LOWERING_ATTRIBUTE = "_lower_using_switch_merge"
_LOWERABLE_OPS = frozenset(
    {"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})


def _allow_inlining(graph_def) -> None:
  """Clears what would keep a call inlined or control flow functional."""
  for function in graph_def.library.function:
    for name in _NO_INLINE_ATTRIBUTES:
      if name in function.attr:
        del function.attr[name]
    _allow_lowering(function.node_def)
  for node in graph_def.node:
    if node.op in ("PartitionedCall", "StatefulPartitionedCall"):
      for name in _NO_INLINE_ATTRIBUTES:
        if name in node.attr:
          del node.attr[name]
  _allow_lowering(graph_def.node)


def _allow_lowering(nodes) -> None:
  for node in nodes:
    if node.op in _LOWERABLE_OPS:
      node.attr[_LOWERING_ATTRIBUTE].b = True


def flatten(meta_graph: meta_graph_pb2.MetaGraphDef,
            fetches: Sequence[str]) -> meta_graph_pb2.MetaGraphDef:
  """Inlines functions and lowers control flow with Grappler's function pass."""
  node_names = {node.name for node in meta_graph.graph_def.node}
  missing = [f for f in fetches if f not in node_names]
  if missing:
    raise errors.InputError(f"fetch node(s) not in the graph: {missing[:5]}")
  source = meta_graph_pb2.MetaGraphDef()
  source.CopyFrom(meta_graph)
  collection = source.collection_def[FETCH_COLLECTION]
  collection.Clear()
  collection.node_list.value.extend(fetches)
  _allow_inlining(source.graph_def)
  try:
    flat_graph_def = tf_optimizer.OptimizeGraph(
        _flattening_config(), source, strip_default_attributes=False)
  except (tf.errors.OpError, ValueError, RuntimeError) as e:
    raise errors.GraphLoadError(
        f"Grappler could not flatten the graph: {errors.first_line(e)}") from e
  leftovers = sorted({n.op for n in flat_graph_def.node} & _FUNCTIONAL_OPS)
  if leftovers:
    raise errors.GraphLoadError(
        f"graph still has function calls / functional control flow after "
        f"inlining: {leftovers}")
  flat = meta_graph_pb2.MetaGraphDef()
  flat.CopyFrom(source)
  flat.graph_def.CopyFrom(flat_graph_def)
  flat.graph_def.library.Clear()  # everything is inlined; keep the proto small
  return flat


def _flattening_config() -> config_pb2.ConfigProto:
  config = config_pb2.ConfigProto()
  rewrite = config.graph_options.rewrite_options
  rewrite.optimizers[:] = ["function"]
  rewrite.min_graph_nodes = -1
  rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
  return config


def _parse_text(path: str, data: bytes) -> meta_graph_pb2.MetaGraphDef:
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.GraphLoadError(f"{path}: text graph is not UTF-8") from e
  meta_graph = meta_graph_pb2.MetaGraphDef()
  try:
    text_format.Parse(text, meta_graph)
    if meta_graph.graph_def.node:
      return meta_graph
  except text_format.ParseError:
    pass
  except RecursionError as e:  # the pure-Python text parser recurses per level
    raise errors.GraphLoadError(f"{path}: text graph nested too deeply") from e
  graph_def = tf.compat.v1.GraphDef()
  try:
    text_format.Parse(text, graph_def)
  except text_format.ParseError as e:
    raise errors.GraphLoadError(
        f"{path}: not a text GraphDef or MetaGraphDef: {errors.first_line(e)}") from e
  except RecursionError as e:
    raise errors.GraphLoadError(f"{path}: text graph nested too deeply") from e
  return _wrap_graph_def(path, graph_def)


def _parse_binary(path: str, data: bytes) -> meta_graph_pb2.MetaGraphDef:
  """Tries MetaGraphDef, then GraphDef; keeps the one that looks like a graph."""
  meta_graph = meta_graph_pb2.MetaGraphDef()
  try:
    meta_graph.ParseFromString(data)
    if _has_named_nodes(meta_graph.graph_def):
      return meta_graph
    parsed_meta_graph = meta_graph.HasField("meta_info_def")
  except (proto_message.DecodeError, RuntimeWarning, ValueError):
    parsed_meta_graph = False
  graph_def = tf.compat.v1.GraphDef()
  try:
    graph_def.ParseFromString(data)
  except (proto_message.DecodeError, RuntimeWarning, ValueError) as e:
    if parsed_meta_graph:  # a MetaGraphDef of an empty graph
      raise errors.GraphLoadError(
          f"{path}: parsed, but the graph has no nodes") from e
    raise errors.GraphLoadError(
        f"{path}: not a binary GraphDef or MetaGraphDef "
        f"(protobuf parse failed: {errors.first_line(e)})") from e
  return _wrap_graph_def(path, graph_def)


def _wrap_graph_def(path: str, graph_def) -> meta_graph_pb2.MetaGraphDef:
  if not graph_def.node:
    raise errors.GraphLoadError(f"{path}: parsed, but the graph has no nodes")
  if not _has_named_nodes(graph_def):
    raise errors.GraphLoadError(
        f"{path}: parsed, but holds no graph (nodes without a name or an op)")
  meta_graph = meta_graph_pb2.MetaGraphDef()
  meta_graph.graph_def.CopyFrom(graph_def)
  return meta_graph


def _has_named_nodes(graph_def) -> bool:
  return bool(graph_def.node) and all(
      node.name and node.op for node in graph_def.node)


def _check_importable(path: str, graph_def) -> None:
  """GraphLoadError naming the first problem TF's importer finds."""
  library_ops = {f.signature.name for f in graph_def.library.function}
  for node in graph_def.node:
    if op_def_registry.get(node.op) is None and node.op not in library_ops:
      raise errors.GraphLoadError(
          f"{path}: node {node.name!r} has op type {node.op!r}, which this "
          f"TensorFlow ({tf.__version__}) does not know")
  try:
    with tf.Graph().as_default():
      tf.graph_util.import_graph_def(graph_def, name="")
  except (ValueError, TypeError, KeyError, tf.errors.OpError) as e:
    raise errors.GraphLoadError(
        f"{path}: invalid graph: {errors.first_line(e)}") from e


def _collection_fetches(meta_graph) -> list:
  """The ops of the `train_op` collection.

  TF1 code adds ops and tensors alike (`add_to_collection(TRAIN_OP, loss)`
  stores `loss:0`); a tensor or control input names its op, which is what
  Grappler and a session's targets take.
  """
  values = meta_graph.collection_def[FETCH_COLLECTION].node_list.value
  return _unique(_node_name(name) for name in values if name)


def _signature_fetches(meta_graph) -> list:
  names = []
  for signature in meta_graph.signature_def.values():
    for tensor_info in signature.outputs.values():
      if tensor_info.name:
        names.append(_node_name(tensor_info.name))
  return _unique(names)


def _sink_nodes(graph_def) -> list:
  """Nodes nobody consumes: the natural fetches of a bare GraphDef.

  (graph_view.sinks does the same for costing; graph_view imports this module,
  so this one cannot import it back.)
  """
  consumed = {_node_name(name) for node in graph_def.node
              for name in node.input}
  return [n.name for n in graph_def.node if n.name not in consumed]


def _node_name(name: str) -> str:
  """`op`, `op:1` and `^op` all name the op `op`."""
  return name.lstrip("^").split(":")[0]


def _unique(items) -> list:
  return list(dict.fromkeys(items))
