"""Real per-op times of one step, measured with the TF runtime.

A roofline is a model; a profile is what this machine did. `profile_step`
runs the flat graph as given (Grappler off, so node names survive) in a
Session with FULL_TRACE, and its result can replace the roofline of one
device kind in the op-graph document (`costs.op_graph_document(profile=)`).
"""

import dataclasses
import statistics
from typing import Any, Dict, List, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.framework import types_pb2  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top


def profile_step(source,
                 example_args: Sequence[Any] = (),
                 *,
                 runs: int = 5,
                 warmup: int = 2,
                 session_config: Optional[config_pb2.ConfigProto] = None
                ) -> Dict[str, float]:
  """Measures each op of one step with the TF runtime, in microseconds.

  Runs the flat graph in a `tf.compat.v1.Session` with FULL_TRACE and reads
  `RunMetadata.step_stats`: per node, the time from its start to the end of
  its outputs (`all_end_rel`), summed over the node's executions in the step
  (loop bodies run many times) and, if several devices report the node (a
  GPU's host and stream), the largest. Grappler is off so that the graph runs
  as given. Result: median over `runs` steps after `warmup` steps.

  Placeholders of function arguments get `example_args` if given, else ones
  (unknown dimensions -> 1); captured tensors get their captured values;
  captured variables become in-graph variables initialized from the captured
  values (the caller's variables are not modified).

  Args:
    source: an ExtractedGraph, a flat MetaGraphDef, or a tf.function / Python
      function (then `example_args` are required to trace it).
    example_args: arguments of the function (used as feeds).
    runs: measured steps.
    warmup: unmeasured steps first.
    session_config: optional ConfigProto (threads, devices).

  Returns:
    Node name -> median microseconds, for the nodes the runtime reported.

  Raises:
    errors.InputError: the graph has a resource input whose variable is not
      known (e.g. a MetaGraphDef with captured-handle placeholders).
  """
  if runs < 1 or warmup < 0:
    raise errors.InputError("profile_step needs runs >= 1 and warmup >= 0")
  if callable(source) and not isinstance(source, extract.ExtractedGraph):
    source = extract.from_function(source, *example_args)
  graph = graph_view.as_graph(source)
  runnable = _runnable_graph(graph, example_args)
  with tf.Graph().as_default() as tf_graph:
    tf.graph_util.import_graph_def(runnable.graph_def, name="")
    init_ops, init_feeds = _variable_initializers(tf_graph, runnable)
    targets = [tf_graph.get_operation_by_name(f)
               for f in graph.fetches or graph_view.sinks(graph.nodes)]
    feeds = {tf_graph.get_tensor_by_name(f"{n}:0"): v
             for n, v in runnable.feeds.items()}
  with tf.compat.v1.Session(graph=tf_graph,
                            config=_profiling_config(session_config)) as sess:
    if init_ops:
      sess.run(init_ops, init_feeds)
    for _ in range(warmup):
      sess.run(targets, feeds)
    samples = [_traced_run(sess, targets, feeds) for _ in range(runs)]
  names = {node.name for node in graph.nodes}
  return _median_times(samples, names)


@dataclasses.dataclass
class _Runnable:
  graph_def: Any
  feeds: Dict[str, Any]
  variables: Dict[str, Any]  # handle node name -> initial value (numpy)


def _runnable_graph(graph: graph_view.Graph, example_args) -> _Runnable:
  """A GraphDef a Session can run, with feeds and variable initial values."""
  graph_def = tf.compat.v1.GraphDef()
  graph_def.CopyFrom(graph.meta_graph.graph_def)
  captured = _captured_values(graph.extracted)
  arg_values = _arg_values(graph.extracted, example_args)
  feeds, variables = {}, {}
  for node in graph_def.node:
    if node.op != "Placeholder":
      continue
    dtype = node.attr["dtype"].type
    if dtype == types_pb2.DT_RESOURCE:
      variables[node.name] = _captured_variable_value(node, graph, captured)
      graph_view.materialize_var_handle(node, *graph.handle_shapes[node.name])
      node.attr["shared_name"].s = f"tf_gdp_profile/{node.name}".encode()
    elif node.name in captured:
      feeds[node.name] = np.asarray(captured[node.name])
    elif node.name in arg_values:
      feeds[node.name] = arg_values[node.name]
    else:
      feeds[node.name] = _ones(dtype, node.attr["shape"].shape)
  return _Runnable(graph_def, feeds, variables)


def _captured_values(extracted) -> Dict[str, Any]:
  if extracted is None:
    return {}
  return dict(zip(extracted.capture_names, extracted.captured_values))


def _arg_values(extracted, example_args) -> Dict[str, Any]:
  """Placeholder name -> value of the flattened example arguments."""
  if extracted is None or not example_args:
    return {}
  flat = [a for a in tf.nest.flatten(list(example_args))
          if isinstance(a, (tf.Tensor, np.ndarray, float, int, bool))]
  if len(flat) != len(extracted.arg_names):
    return {}
  return {name: np.asarray(value)
          for name, value in zip(extracted.arg_names, flat)}


def _captured_variable_value(node, graph: graph_view.Graph, captured):
  """The current value of the variable a resource placeholder stands for."""
  if node.name not in captured or node.name not in graph.handle_shapes:
    raise errors.InputError(
        f"cannot profile: resource input {node.name!r} is not a known "
        f"variable (profile an ExtractedGraph of a tf.function, or a graph "
        f"whose variables are VarHandleOp nodes)")
  dtype = graph.handle_shapes[node.name][0]
  try:
    value = tf.raw_ops.ReadVariableOp(resource=captured[node.name],
                                      dtype=tf.dtypes.as_dtype(dtype))
  except (tf.errors.OpError, ValueError, TypeError) as e:
    raise errors.InputError(
        f"cannot profile: cannot read captured variable {node.name!r}: "
        f"{errors.first_line(e)}") from e
  return value.numpy()


def _ones(dtype: int, shape) -> np.ndarray:
  dims = [] if shape.unknown_rank else [max(d.size, 1) for d in shape.dim]
  tf_dtype = tf.dtypes.as_dtype(dtype)
  if tf_dtype == tf.string:
    return np.full(dims, b"", dtype=object)
  return np.ones(dims, dtype=tf_dtype.as_numpy_dtype)


def _variable_initializers(tf_graph, runnable: _Runnable):
  """Assign ops (fed with the initial values) for in-graph variables."""
  ops, feeds = [], {}
  for name, value in runnable.variables.items():
    handle = tf_graph.get_tensor_by_name(f"{name}:0")
    value_input = tf.compat.v1.placeholder(
        tf.dtypes.as_dtype(value.dtype), value.shape,
        name=f"tf_gdp_init/{name}")
    ops.append(tf.raw_ops.AssignVariableOp(resource=handle, value=value_input))
    feeds[value_input] = value
  return ops, feeds


def _profiling_config(config) -> config_pb2.ConfigProto:
  """The caller's config with graph rewrites off, so nodes keep their names."""
  result = config_pb2.ConfigProto()
  if config is not None:
    result.CopyFrom(config)
  result.allow_soft_placement = True
  result.graph_options.rewrite_options.disable_meta_optimizer = True
  result.graph_options.optimizer_options.opt_level = (
      config_pb2.OptimizerOptions.L0)
  result.graph_options.optimizer_options.do_constant_folding = False
  return result


def _traced_run(sess, targets, feeds) -> Dict[str, float]:
  options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
  metadata = config_pb2.RunMetadata()
  sess.run(targets, feeds, options=options, run_metadata=metadata)
  return node_micros(metadata)


def node_micros(metadata) -> Dict[str, float]:
  """Op name -> traced time (us) from a FULL_TRACE RunMetadata.

  An op's kernels on one device add up; across devices (an op's send and
  receive halves) the longest counts.
  """
  per_node: Dict[str, float] = {}
  for device_stats in metadata.step_stats.dev_stats:
    on_device: Dict[str, float] = {}
    for stats in device_stats.node_stats:
      name = stats.node_name.split(":")[0]
      micros = (stats.all_end_rel_nanos / 1e3 if stats.all_end_rel_nanos
                else float(stats.all_end_rel_micros))
      on_device[name] = on_device.get(name, 0.0) + micros
    for name, micros in on_device.items():
      per_node[name] = max(per_node.get(name, 0.0), micros)
  return per_node


def _median_times(samples: List[Dict[str, float]], names) -> Dict[str, float]:
  result = {}
  for name in names:
    values = [s[name] for s in samples if name in s]
    if values:
      result[name] = float(statistics.median(values))
  return result
