"""The forward-pass benchmark runs end to end on a small synthetic graph."""

import numpy as np

from tf_gdp.bench import forward_speed
from tf_gdp.cost import topology
from tf_gdp.graph import generators


def test_grid_graph_is_a_layered_dag_of_the_requested_size():
  graph = generators.random_grid_graph(2000)
  assert graph.num_nodes == 2000
  assert 1.0 < graph.num_edges / graph.num_nodes < 2.0
  assert (graph.edge_src < graph.edge_dst).all()
  again = generators.random_grid_graph(2000)
  np.testing.assert_array_equal(graph.edge_dst, again.edge_dst)


def test_run_reports_times_and_memory():
  result = forward_speed.run(generators.random_grid_graph(300),
                             topology.get("p100x2"), repeats=1)
  for key in ("inputs_s", "first_call_s", "forward_s", "peak_rss_gib"):
    assert result[key] > 0, key
  assert result["parameters"] > 10_000
