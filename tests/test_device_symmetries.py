"""Device symmetries: renamings that simulate the same, and matched labels."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
from tf_gdp.cost import simulator  # pylint: disable=g-import-not-at-top
from tf_gdp.cost import topology as topology_lib  # pylint: disable=g-import-not-at-top
from tf_gdp.rl import device_symmetries  # pylint: disable=g-import-not-at-top
from tf_gdp.rl import imitation  # pylint: disable=g-import-not-at-top

GIB = 1 << 30


def _box(bandwidths, speeds=(1.0, 1.0, 1.0)):
  devices = [topology_lib.Device(
      f"/job:localhost/replica:0/task:0/device:GPU:{i}", "GPU", 16 * GIB, s)
             for i, s in enumerate(speeds)]
  bandwidth = np.asarray(bandwidths, float)
  return topology_lib.custom("box", devices, bandwidth,
                             np.full(bandwidth.shape, 10.0), {"GPU": "p100"})


def test_equal_devices_on_equal_links_trade_places_freely():
  found = device_symmetries.symmetries(_box(np.full((3, 3), 10.0)))
  assert len(found) == 6 and found[0].tolist() == [0, 1, 2]


def test_a_slower_device_or_a_faster_link_breaks_the_symmetry():
  slow = device_symmetries.symmetries(
      _box(np.full((3, 3), 10.0), speeds=(1.0, 0.5, 1.0)))
  assert sorted(map(tuple, slow.tolist())) == [(0, 1, 2), (2, 1, 0)]
  fast_pair = np.full((3, 3), 10.0)
  fast_pair[0, 1] = fast_pair[1, 0] = 40.0
  linked = device_symmetries.symmetries(_box(fast_pair))
  assert sorted(map(tuple, linked.tolist())) == [(0, 1, 2), (1, 0, 2)]


def test_every_symmetry_of_a_shared_channel_preset_simulates_the_same():
  topology = topology_lib.get("p100x4")
  found = device_symmetries.symmetries(topology)
  # Two PCIe switches of two GPUs each: swap within, swap the switches.
  assert len(found) == 8
  graph = graph_specs.parse("layered:60:width=4")[0].load("p100x4").graph
  rng = np.random.default_rng(0)
  placement = rng.integers(0, 4, graph.num_nodes).astype(np.int32)
  times = [simulator.simulate(graph, s[placement], topology).step_time_us
           for s in found]
  np.testing.assert_allclose(times, times[0], rtol=1e-9)
  # A renaming across the switches that is not a symmetry changes it.
  other = np.array([0, 2, 1, 3, 4])
  assert simulator.simulate(graph, other[placement], topology).step_time_us \
      != times[0]


def test_matched_labels_take_the_renaming_the_logits_prefer():
  # Two graphs, three devices; the policy predicts device 2 everywhere on
  # the first graph and device 0 on the second.
  logits = tf.constant(np.stack([
      np.tile([0.0, 0.0, 5.0], (4, 1)), np.tile([5.0, 0.0, 0.0], (4, 1))]),
                       tf.float32)
  labels = tf.constant([[0, 0, 0, 1], [1, 1, 1, 1]], tf.int32)
  mask = tf.constant([[1, 1, 1, 1], [1, 1, 1, 0]], tf.float32)
  symmetries = tf.constant(np.stack([
      [[0, 1, 2], [2, 1, 0]],          # 0 <-> 2 allowed
      [[0, 1, 2], [0, 1, 2]]]), tf.int32)  # identity only (padded)
  matched = imitation._matched(logits, labels, mask, symmetries).numpy()
  assert matched.tolist() == [[2, 2, 2, 1], [1, 1, 1, 1]]
