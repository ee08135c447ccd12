"""Control-dependency chains impose a per-device order, and the step runs."""

import numpy as np
import pytest
import tensorflow as tf

from grappler_bridge import errors
from grappler_bridge import execution_order
from grappler_bridge import extract
from grappler_bridge import graph_view
from tf_gdp import graph_specs
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import enforced_order_check
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.runtime import enforced_order
from tf_gdp.runtime import measure

_CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def _two_branches():
  """Two independent matmul branches that meet in one sum, and an update."""
  weights = tf.Variable(tf.fill([16, 16], 0.01), name="weights")

  @tf.function
  def step(x):
    left = tf.matmul(x, weights, name="left")
    right = tf.matmul(tf.tanh(x, name="squash"), weights, name="right")
    total = tf.add(left, right, name="total")
    weights.assign_sub(0.001 * total)
    return tf.reduce_sum(total)

  return extract.from_function(step, tf.ones([16, 16]))


def _local_topology():
  return topology_lib.custom(
      "two-local-cpus",
      [topology_lib.Device(_CPU0, "CPU", 1 << 30),
       topology_lib.Device(_CPU1, "CPU", 1 << 30)],
      [[0, 1.0], [1.0, 0]], [[0, 10.0], [10.0, 0]],
      hardware={"CPU": "local_cpu_core"})


def _control_inputs(graph_def, name):
  node = next(node for node in graph_def.node if node.name == name)
  return [i[1:] for i in node.input if i.startswith("^")]


def test_chain_adds_one_control_input_per_consecutive_pair():
  graph_def = _two_branches().graph_def
  chained = execution_order.chain(graph_def, [["right", "left", "total"]])
  assert "right" in _control_inputs(chained, "left")
  assert "left" in _control_inputs(chained, "total")
  assert _control_inputs(chained, "right") == _control_inputs(
      graph_def, "right")
  added = sum(len(n.input) for n in chained.node) - sum(
      len(n.input) for n in graph_def.node)
  assert added == 2
  assert "left" not in _control_inputs(graph_def, "total")  # not in place


def test_chain_refuses_an_order_against_the_edges():
  graph_def = _two_branches().graph_def
  with pytest.raises(errors.PlacementError, match="contradicts"):
    execution_order.chain(graph_def, [["total", "left"]])


def test_chain_refuses_unknown_and_repeated_ops():
  graph_def = _two_branches().graph_def
  with pytest.raises(errors.PlacementError, match="not in the graph"):
    execution_order.chain(graph_def, [["left", "no_such_op"]])
  with pytest.raises(errors.PlacementError, match="twice"):
    execution_order.chain(graph_def, [["left"], ["right", "left"]])


def test_a_schedules_order_is_enforced_and_the_step_runs():
  extracted = _two_branches()
  topology = _local_topology()
  graph = graph_specs.op_graph_from_extracted(
      extracted, name="two_branches", devices=topology)
  placement = np.zeros(graph.num_nodes, np.int64)
  placement[graph.node_index["right"]] = 1
  schedule = simulator.simulate(graph, placement, topology,
                                record_schedule=True).schedule
  sequences = enforced_order.device_sequences(
      extracted, graph, placement, schedule)
  assert len(sequences) == 2
  chained_names = [name for sequence in sequences for name in sequence]
  assert "right" in sequences[1] and "left" in sequences[0]
  for sequence in sequences:  # each in the schedule's start order
    starts = [schedule.op_start_us[graph.node_index[n]] for n in sequence]
    assert starts == sorted(starts)
  assert "x" not in chained_names  # a source: ready when the step starts
  ordered = enforced_order.ordered(extracted, graph, placement, schedule)
  assert ordered.graph_def is not extracted.graph_def
  for before, after in zip(sequences[0], sequences[0][1:]):
    assert before in _control_inputs(ordered.graph_def, after)
  result = measure.measure(ordered, placement, "local", topology=topology,
                           warmup=1, repeats=2)
  assert result.valid, result.reason


def test_needed_by_follows_data_and_control_inputs_only_backwards():
  graph_def = tf.compat.v1.GraphDef()
  for name, inputs in [("a", []), ("b", ["a"]), ("c", ["b:1", "^d"]),
                       ("d", []), ("unused", ["a"])]:
    node = graph_def.node.add(name=name, op="NoOp")
    node.input.extend(inputs)
  assert graph_view.needed_by(graph_def.node, ["c:0"]) == {"a", "b", "c", "d"}
  assert graph_view.needed_by(graph_def.node, ["b"]) == {"a", "b"}


def test_ordered_variants_are_divided_by_their_own_default_order():
  def variant(method, order, predicted, measured):
    return {"method": method, "order": order, "predicted_us": predicted,
            "round_medians_us": measured, "reasons": []}
  rows = enforced_order_check.rows_of([
      variant("m_etf", "default", 100.0, [200.0, 220.0, 210.0]),
      variant("m_etf", "critical_path", 80.0, [230.0]),
      variant("heft", "default", 50.0, [100.0]),
      variant("heft", "critical_path", 40.0, [90.0]),
      variant("heft", "planned", 45.0, []),
      variant("heft", "default_chained", 50.0, [120.0])])
  assert rows[1]["predicted_ratio"] == pytest.approx(0.8)
  assert rows[1]["measured_ratio"] == pytest.approx(230.0 / 210.0)
  assert rows[4]["measured_ratio"] is None  # never measured validly
  summary = enforced_order_check.summarize([{"rows": rows}])
  assert summary["critical_path"]["n"] == 2
  assert summary["critical_path"]["measured_faster"] == 1
  assert summary["critical_path"]["predicted_median"] == pytest.approx(0.8)
  assert "planned" not in summary
  # Only heft has a control: its critical-path order beats its chains.
  assert summary["critical_path"]["over_chained_median"] == pytest.approx(
      90.0 / 120.0)
  assert summary["critical_path"]["over_chained_faster"] == 1
  assert "over_chained_median" not in summary["default_chained"]


def test_a_check_of_built_steps_refuses_an_unknown_name_in_one_line():
  bench_graphs.check_built(["keras_resnet50"])
  with pytest.raises(SystemExit, match=r"unknown graph\(s\) \['nope'\]"):
    bench_graphs.check_built(["keras_resnet50", "nope"])
