"""Tiny graphs and devices shared by the RL environment and training tests."""

import numpy as np

from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

GIB = 1 << 30


def two_chains(length=4, cost=100.0, nbytes=1_000_000, memory=0):
  """Two independent chains a/op0 -> ... and b/op0 -> ..., equal costs;
  moving a tensor between the `gpus` costs ~105 us."""
  names = [f"{c}/op{i}" for c in "ab" for i in range(length)]
  src, dst = [], []
  for c in range(2):
    for i in range(length - 1):
      src.append(c * length + i)
      dst.append(c * length + i + 1)
  n = 2 * length
  return op_graph.OpGraph.build(
      name=f"two_chains{length}", node_names=names, op_types=["MatMul"] * n,
      costs={"GPU": [cost] * n}, output_bytes=[nbytes] * n,
      memory_bytes=[memory] * n, edge_src=src, edge_dst=dst,
      edge_bytes=[nbytes] * len(src),
      fetches=[names[length - 1], names[-1]])


def gpus(count=2, memory=GIB, name="gpus"):
  devices = [topology_lib.Device(
      f"/job:localhost/replica:0/task:0/device:GPU:{i}", "GPU", memory)
             for i in range(count)]
  return topology_lib.custom(name, devices, np.full((count, count), 10.0),
                             np.full((count, count), 5.0))
