"""The op-graph IR: derived structure (topological order, groups, summary)."""

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.graph import op_graph
from tf_gdp.graph import describe


def _graph(n, edges, groups=None):
  src, dst = (list(x) for x in zip(*edges)) if edges else ([], [])
  return op_graph.OpGraph.build(
      name="t", node_names=[f"n{i}" for i in range(n)], op_types=["Op"] * n,
      costs={"GPU": np.arange(n, dtype=float), "CPU": np.full(n, 2.0)},
      output_bytes=np.full(n, 8), memory_bytes=np.zeros(n, np.int64),
      edge_src=src, edge_dst=dst, edge_bytes=[8] * len(src),
      colocation_groups=groups)


def test_topological_order_respects_every_edge():
  rng = np.random.default_rng(0)
  n = 300
  perm = rng.permutation(n)
  pairs = {(int(perm[min(a, b)]), int(perm[max(a, b)]))
           for a, b in rng.integers(0, n, size=(900, 2)) if a != b}
  graph = _graph(n, sorted(pairs))
  position = np.empty(n, int)
  position[graph.topo_order] = np.arange(n)
  assert sorted(graph.topo_order.tolist()) == list(range(n))
  assert np.all(position[graph.edge_src] < position[graph.edge_dst])


def test_topological_order_breaks_ties_by_node_id():
  graph = _graph(4, [(3, 0)])
  assert graph.topo_order.tolist() == [1, 2, 3, 0]


def test_group_ids_share_ids_within_a_group_only():
  graph = _graph(4, [], groups=["v", None, "v", None])
  ids = graph.group_ids
  assert ids[0] == ids[2]
  assert len({ids[0], ids[1], ids[3]}) == 3


def test_summary_counts():
  info = describe.summary(_graph(3, [(0, 1), (1, 2)], groups=["v", "v", None]))
  assert info["nodes"] == 3 and info["edges"] == 2
  assert info["total_cost_us"]["GPU"] == 3.0
  assert info["nodes_with_cost"]["GPU"] == 2
  assert info["colocation_groups"] == 1 and info["nodes_in_groups"] == 2


def test_build_rejects_mismatched_lengths():
  with pytest.raises(errors.GraphFormatError, match="one entry per node"):
    op_graph.OpGraph.build(
        name="t", node_names=["a", "b"], op_types=["X", "X"],
        costs={"GPU": [1.0]}, output_bytes=[1, 1], memory_bytes=[0, 0],
        edge_src=[], edge_dst=[], edge_bytes=[])
