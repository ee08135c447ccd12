"""Infeasible problems are refused up front, with needed vs available.

`feasibility` must be a necessary condition: whenever it refuses a problem,
no placement at all is valid in the simulator (checked exhaustively on small
random problems); whenever some placement is valid, it stays silent.
"""

import itertools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import placing
from tf_gdp.bench import harness
from tf_gdp.cost import feasibility
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

KIB = 1 << 10


def _graph(n=3, *, memory=None, output=None, temp=None, groups=None,
           kinds=None, pins=None, costs=None):
  return op_graph.OpGraph.build(
      name="g", node_names=[f"op{i}" for i in range(n)],
      op_types=["MatMul"] * n,
      costs=costs or {"GPU": [1.0] * n, "CPU": [5.0] * n},
      output_bytes=output or [KIB] * n, memory_bytes=memory or [0] * n,
      temp_bytes=temp, edge_src=list(range(n - 1)),
      edge_dst=list(range(1, n)), edge_bytes=[KIB] * (n - 1),
      colocation_groups=groups, device_kinds=kinds, pinned_devices=pins)


def _topology(memories, kinds=None):
  kinds = kinds or ["GPU"] * len(memories)
  d = len(memories)
  devices = [topology.Device(
      f"/job:localhost/replica:0/task:0/device:{k}:{i}", k, m)
             for i, (k, m) in enumerate(zip(kinds, memories))]
  return topology.custom("box", devices, np.full((d, d), 10.0),
                         np.full((d, d), 1.0))


def test_a_fitting_problem_passes():
  graph = _graph(memory=[100 * KIB, 0, 0])
  box = _topology([1 << 20, 1 << 20])
  assert feasibility.problem(graph, box) is None
  feasibility.check_feasible(graph, box)


def test_an_op_bigger_than_every_device_is_named_with_numbers():
  graph = _graph(memory=[0, 3 * KIB, 0], temp=[0, 512, 0])
  with pytest.raises(errors.InfeasibleError) as info:
    feasibility.check_feasible(graph, _topology([2 * KIB, 4 * KIB - 1]))
  message = str(info.value)
  assert message.startswith("infeasible: op 'op1' (MatMul) needs 4.50 KiB")
  assert "persistent 3.00 KiB (3072 bytes)" in message
  assert "outputs and scratch 1.50 KiB (1536 bytes)" in message
  assert message.endswith("device:GPU:1, has 4.00 KiB (4095 bytes)")
  assert isinstance(info.value, errors.InputError) and "\n" not in message


def test_a_colocation_group_must_fit_on_one_device():
  # Each op fits a 3 KiB device alone; together they need 5 KiB.
  graph = _graph(memory=[2 * KIB, 2 * KIB, 0], groups=["g", "g", None])
  message = feasibility.problem(graph, _topology([3 * KIB, 3 * KIB]))
  assert message.startswith("infeasible: colocation group 'g' (2 ops) needs "
                            "5.00 KiB")


def test_the_whole_graph_must_fit_in_all_devices_together():
  # Each op (3 KiB kept + 1 KiB output) fits either device; all do not.
  graph = _graph(memory=[3 * KIB] * 3)
  message = feasibility.problem(graph, _topology([5 * KIB, 5 * KIB - 1]))
  assert message == (
      "infeasible: the graph needs at least 10.00 KiB (10240 bytes) "
      "(persistent 9.00 KiB (9216 bytes) + outputs and scratch of op 'op0' "
      "1.00 KiB (1024 bytes)) but the 2 devices of 'box' have 10.00 KiB "
      "(10239 bytes) in total")
  assert feasibility.problem(graph, _topology([5 * KIB, 5 * KIB])) is None


def test_kinds_and_pins_the_topology_cannot_honour():
  graph = _graph(kinds=[None, ("CPU",), None])
  message = feasibility.problem(graph, _topology([KIB * 8] * 2))
  assert message.startswith("infeasible: op 'op1' (MatMul) may run only on "
                            "['CPU'], but topology 'box' has no such device")
  pinned = _graph(pins=[None, None, "/device:GPU:5"])
  assert "is pinned to '/device:GPU:5'" in feasibility.problem(
      pinned, _topology([KIB * 8] * 2))
  split = _graph(groups=["g", "g", None],
                 pins=["/device:GPU:0", "/device:GPU:1", None])
  assert feasibility.problem(split, _topology([KIB * 8] * 2)) == (
      "infeasible: colocation group 'g' (2 ops) must share one device, but "
      "no single device satisfies the kind and pin constraints of all its ops")


@st.composite
def small_problems(draw):
  n = draw(st.integers(1, 4))
  d = draw(st.integers(1, 3))
  sizes = st.integers(0, 6 * KIB)
  graph = _graph(
      n, memory=[draw(sizes) for _ in range(n)],
      output=[draw(sizes) for _ in range(n)],
      temp=[draw(sizes) for _ in range(n)],
      groups=[draw(st.sampled_from([None, "g"])) for _ in range(n)],
      kinds=[draw(st.sampled_from([None, ("GPU",), ("CPU",)]))
             for _ in range(n)])
  memories = [draw(st.integers(1, 12 * KIB)) for _ in range(d)]
  kinds = [draw(st.sampled_from(["GPU", "CPU"])) for _ in range(d)]
  return graph, _topology(memories, kinds)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(small_problems())
def test_refusal_means_no_placement_is_valid(problem):
  graph, box = problem
  placements = np.array(list(itertools.product(
      range(box.num_devices), repeat=graph.num_nodes)), np.int32)
  any_valid = bool(simulator.simulate_batch(graph, placements, box).valid.any())
  refused = feasibility.problem(graph, box)
  if refused is not None:
    assert not any_valid, refused


def test_place_refuses_before_searching(tmp_path):
  graph = _graph(memory=[0, 3 * KIB, 0])
  with pytest.raises(errors.InfeasibleError, match="infeasible: op 'op1'"):
    placing.place(graph, _topology([2 * KIB] * 2), "random", compare=())
  result = placing.place(graph, _topology([8 * KIB] * 2), "random",
                         compare=())
  assert result.valid


def test_bench_rows_say_infeasible_instead_of_placing(tmp_path):
  graph = _graph(memory=[0, 3 * KIB, 0])
  path = str(tmp_path / "box.json")
  topology.save(_topology([2 * KIB] * 2), path)
  rows = harness.bench_graph(graph_specs.LoadedGraph(graph), "g", path,
                             ["single_device", "random"])
  assert [r.valid for r in rows] == [False, False]
  assert all(r.reason.startswith("no placement: infeasible: op 'op1'")
             for r in rows)
