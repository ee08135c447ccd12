"""Real per-op times of one step, measured with the TF runtime.

A roofline is a model; a profile is what this machine did. `profile_step`
runs the flat graph as given (Grappler off, so node names survive) in a
Session with FULL_TRACE, and its result can replace the roofline of one
device kind in the op-graph document (`costs.op_graph_document(profile=)`).
Profiling runs the graph's ops: a graph with ops that reach outside the step
(`side_effects`) is refused unless side effects are allowed.
"""

import statistics
from typing import Any, Dict, List, Optional, Sequence

from grappler_bridge import tf_env

tf_env.prepare_tensorflow_environment()

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top

from grappler_bridge import errors  # pylint: disable=g-import-not-at-top
from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
from grappler_bridge import graph_view  # pylint: disable=g-import-not-at-top
from grappler_bridge import runnable as runnable_lib  # pylint: disable=g-import-not-at-top
from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top


def profile_step(source,
                 example_args: Sequence[Any] = (),
                 *,
                 runs: int = 5,
                 warmup: int = 2,
                 session_config: Optional[config_pb2.ConfigProto] = None,
                 allow_side_effects: bool = False) -> Dict[str, float]:
  """Measures each op of one step with the TF runtime, in microseconds.

  Runs the flat graph in a `tf.compat.v1.Session` with FULL_TRACE and reads
  `RunMetadata.step_stats`: per node, the time from its start to the end of
  its outputs (`all_end_rel`), summed over the node's executions in the step
  (loop bodies run many times) and, if several devices report the node (a
  GPU's host and stream), the largest. Grappler is off so that the graph runs
  as given. Result: median over `runs` steps after `warmup` steps.

  The graph is made self-contained by `runnable.runnable_graph`:
  placeholders of function arguments get `example_args` if given, else ones
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
    allow_side_effects: run the graph even if it has ops that reach outside
      the step (`side_effects.check`).

  Returns:
    Node name -> median microseconds, for the nodes the runtime reported.

  Raises:
    errors.InputError: the graph has a resource input whose variable is not
      known (e.g. a MetaGraphDef with captured-handle placeholders), or ops
      that reach outside the step without `allow_side_effects`.
  """
  if runs < 1 or warmup < 0:
    raise errors.InputError("profile_step needs runs >= 1 and warmup >= 0")
  if callable(source) and not isinstance(source, extract.ExtractedGraph):
    source = extract.from_function(source, *example_args)
  graph = graph_view.as_graph(source)
  side_effects.check(graph.meta_graph.graph_def,
                     allow_side_effects=allow_side_effects)
  try:
    runnable = runnable_lib.runnable_graph(
        graph, _arg_values(graph.extracted, example_args),
        name_prefix="tf_gdp_profile")
  except errors.InputError as e:
    raise errors.InputError(f"cannot profile: {e}") from e
  step = runnable.imported(graph.fetches or graph_view.sinks(graph.nodes))
  with tf.compat.v1.Session(graph=step.graph,
                            config=_profiling_config(session_config)) as sess:
    if step.init_ops:
      sess.run(step.init_ops, step.init_feeds)
    for _ in range(warmup):
      sess.run(step.targets, step.feeds)
    samples = [_traced_run(sess, step.targets, step.feeds)
               for _ in range(runs)]
  names = {node.name for node in graph.nodes}
  return median_times(samples, names)


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


def median_times(samples: List[Dict[str, float]], names) -> Dict[str, float]:
  """Per name, the median of its times over the samples that report it."""
  result = {}
  for name in names:
    values = [s[name] for s in samples if name in s]
    if values:
      result[name] = float(statistics.median(values))
  return result
