"""A flat graph made self-contained, for a Session to run on its own.

A tf.function's flat graph reads its variables through captured resource
handles, and its arguments and other captured tensors through placeholders;
a Session given only the GraphDef has none of them. The in-process profile
(`profiling`) and measurements on a target run such graphs the same way:
each captured handle becomes an in-graph variable (VarHandleOp) initialized
from the captured variable's current value (the caller's variable is never
written), the other captures and the arguments are fed, and a bare graph's
own VarHandleOps (and a TF1 graph's reference variables) start from small
values. Every VarHandleOp gets a fresh
shared name, so that two runs never share a variable.
"""

import dataclasses
import uuid
from typing import Any, Dict, List, Mapping, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top

# TF1 reference variables: their values live in the session that runs them,
# so a graph of them (a TF1 MetaGraphDef or SavedModel) is initialized here
# like a bare graph's VarHandleOps.
REF_VARIABLE_OPS = frozenset({"VariableV2", "Variable"})
# Initial value range of in-graph variables nobody gave a value for (a bare
# GraphDef's VarHandleOps): small, so repeated training steps stay finite.
_UNKNOWN_INIT_SCALE = 0.05


@dataclasses.dataclass
class ImportedStep:
  """A runnable graph imported into a new tf.Graph, ready for a Session."""
  graph: tf.Graph
  targets: List[tf.Operation]  # the fetches, run as targets
  feeds: Dict[tf.Tensor, np.ndarray]  # fed every step
  init_ops: List[tf.Operation]  # run once, with `init_feeds`
  init_feeds: Dict[tf.Tensor, np.ndarray]


@dataclasses.dataclass
class RunnableGraph:
  """A GraphDef a Session can run on its own, with what to feed."""
  graph_def: Any
  feeds: Dict[str, np.ndarray]  # placeholder name -> value (every step)
  variables: Dict[str, np.ndarray]  # variable node name -> initial value
  name_prefix: str = "tf_gdp"

  def imported(self, fetches: Sequence[str]) -> ImportedStep:
    """The graph in a new tf.Graph, with one assign op per variable.

    Each assign op runs on its variable's device and is fed the variable's
    initial value through a placeholder (values never become constants).
    """
    with tf.Graph().as_default() as graph:
      tf.graph_util.import_graph_def(self.graph_def, name="")
      init_ops, init_feeds = [], {}
      for name, value in self.variables.items():
        handle = graph.get_tensor_by_name(f"{name}:0")
        with graph.device(handle.op.device):
          value_input = tf.compat.v1.placeholder(
              tf.dtypes.as_dtype(value.dtype), value.shape,
              name=f"{self.name_prefix}_init/{name}")
          if handle.op.type in REF_VARIABLE_OPS:
            init_ops.append(tf.raw_ops.Assign(ref=handle, value=value_input).op)
          else:
            init_ops.append(tf.raw_ops.AssignVariableOp(resource=handle,
                                                        value=value_input))
        init_feeds[value_input] = value
      targets = [graph.get_operation_by_name(f) for f in fetches]
      feeds = {graph.get_tensor_by_name(f"{name}:0"): value
               for name, value in self.feeds.items()}
    return ImportedStep(graph, targets, feeds, init_ops, init_feeds)


def runnable_graph(graph: graph_view.Graph,
                   arg_feeds: Mapping[str, np.ndarray], *,
                   graph_def=None,
                   name_prefix: str = "tf_gdp") -> RunnableGraph:
  """Makes a flat graph self-contained: variables in-graph, feeds known.

  Args:
    graph: the flat graph and what is known of its captures
      (`graph_view.as_graph`).
    arg_feeds: argument placeholder name -> value. Placeholders that are
      neither captured nor given get ones (unknown dimensions -> 1).
    graph_def: a copy of the graph's GraphDef to run instead (the same nodes
      with other device fields, e.g. `rewrite.apply_placement`'s result).
    name_prefix: starts the variables' shared names and the names of their
      initializers' placeholders.

  Returns:
    The RunnableGraph (its GraphDef is a copy; the inputs are not changed).

  Raises:
    InputError: a resource input stands for no known variable, or a captured
      variable cannot be read.
  """
  runnable = tf.compat.v1.GraphDef()
  runnable.CopyFrom(graph.meta_graph.graph_def if graph_def is None
                    else graph_def)
  captured = ({} if graph.extracted is None else dict(
      zip(graph.extracted.capture_names, graph.extracted.captured_values)))
  run_id = uuid.uuid4().hex[:12]
  feeds, variables = {}, {}
  for node in runnable.node:
    if node.op == "Placeholder":
      dtype = node.attr["dtype"].type
      if dtype == types_pb2.DT_RESOURCE:
        if node.name not in graph.handle_shapes or node.name not in captured:
          raise errors.InputError(
              f"resource input {node.name!r} is not a known variable (run an "
              f"ExtractedGraph of a tf.function, or a graph whose variables "
              f"are VarHandleOp nodes)")
        dtype, shape = graph.handle_shapes[node.name]
        variables[node.name] = _read_variable(node.name, captured[node.name],
                                              dtype)
        graph_view.materialize_var_handle(node, dtype, shape)
      elif node.name in captured:
        feeds[node.name] = np.asarray(captured[node.name])
      elif node.name in arg_feeds:
        feeds[node.name] = arg_feeds[node.name]
      else:
        feeds[node.name] = _ones(dtype, node.attr["shape"].shape)
    elif (node.op == "VarHandleOp" or node.op in REF_VARIABLE_OPS
         ) and node.name not in variables:
      variables[node.name] = _small_values(node.attr["dtype"].type,
                                           node.attr["shape"].shape)
    if node.op == "VarHandleOp" or node.op in REF_VARIABLE_OPS:
      node.attr["shared_name"].s = (
          f"{name_prefix}/{run_id}/{node.name}".encode())
  return RunnableGraph(runnable, feeds, variables, name_prefix)


def _read_variable(name: str, handle, dtype: int) -> np.ndarray:
  try:
    return tf.raw_ops.ReadVariableOp(
        resource=handle, dtype=tf.dtypes.as_dtype(dtype)).numpy()
  except (tf.errors.OpError, ValueError, TypeError) as e:
    raise errors.InputError(f"cannot read captured variable {name!r}: "
                            f"{errors.first_line(e)}") from e


def _dims(shape) -> List[int]:
  return [] if shape.unknown_rank else [max(d.size, 1) for d in shape.dim]


def _ones(dtype: int, shape) -> np.ndarray:
  tf_dtype = tf.dtypes.as_dtype(dtype)
  if tf_dtype == tf.string:
    return np.full(_dims(shape), b"", dtype=object)
  return np.ones(_dims(shape), dtype=tf_dtype.as_numpy_dtype)


def _small_values(dtype: int, shape) -> np.ndarray:
  tf_dtype = tf.dtypes.as_dtype(dtype)
  if not tf_dtype.is_floating:
    return _ones(dtype, shape)
  rng = np.random.default_rng(0)
  return rng.uniform(-_UNKNOWN_INIT_SCALE, _UNKNOWN_INIT_SCALE,
                     _dims(shape)).astype(tf_dtype.as_numpy_dtype)
