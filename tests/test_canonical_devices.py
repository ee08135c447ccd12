"""Canonical device labels of imitation targets: free relabellings only."""

import numpy as np

from tf_gdp import graph_specs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.policy import features
from tf_gdp.rl import canonical_devices

GIB = 1 << 30


def _box(bandwidths, speeds=(1.0, 1.0, 1.0)):
  devices = [topology_lib.Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                                 "GPU", 16 * GIB, s)
             for i, s in enumerate(speeds)]
  bandwidth = np.asarray(bandwidths, float)
  return topology_lib.custom("box", devices, bandwidth,
                             np.full(bandwidth.shape, 10.0), {"GPU": "p100"})


def test_devices_are_numbered_by_first_use_within_their_class():
  topology = _box(np.full((3, 3), 10.0), speeds=(1.0, 0.5, 1.0))
  # Group order uses GPU 2, then GPU 1 (its own class), then GPU 0.
  permutation = canonical_devices.first_use_permutation(
      np.array([2, 2, 1, 0, 2]), topology)
  assert permutation.tolist() == [2, 1, 0]  # 2 -> 0 and 0 -> 2; 1 stays
  identity = canonical_devices.first_use_permutation(np.array([0, 1]),
                                                     topology)
  assert identity.tolist() == [0, 1, 2]


def _graph_and_inputs(topology):
  graph = graph_specs.parse("layered:40:width=4")[0].load("p100x2").graph
  return graph, features.policy_inputs(graph, topology)


def test_a_free_relabelling_is_taken_and_a_costly_one_refused():
  symmetric = _box(np.full((3, 3), 10.0))
  graph, inputs = _graph_and_inputs(symmetric)
  groups = np.where(np.arange(inputs.num_groups) < inputs.num_groups // 2,
                    2, 1)
  placement = features.group_to_node_placement(inputs, groups)
  step = simulator.simulate(graph, placement, symmetric).step_time_us
  relabelled, changed = canonical_devices.canonical(
      inputs, graph, symmetric, groups, step)
  assert changed and set(relabelled.tolist()) == {0, 1}
  assert relabelled[0] == 0
  moved = features.group_to_node_placement(inputs, relabelled)
  assert simulator.simulate(graph, moved, symmetric).step_time_us <= step * (
      1 + 1e-9)

  # GPUs 1 and 2 share a fast link, GPU 0 is far: moving the split to 0/1 is
  # slower, so the search's labels stay.
  lopsided = _box([[10.0, 0.01, 0.01], [0.01, 10.0, 50.0],
                   [0.01, 50.0, 10.0]])
  graph, inputs = _graph_and_inputs(lopsided)
  placement = features.group_to_node_placement(inputs, groups)
  step = simulator.simulate(graph, placement, lopsided).step_time_us
  kept, changed = canonical_devices.canonical(inputs, graph, lopsided, groups,
                                              step)
  assert not changed and kept.tolist() == groups.tolist()
