"""The local_search move-set bench on a small generated graph, and its flags."""

import pytest

import bench_flags  # tests/ helper
from tf_gdp.bench import local_search_moves
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators


def test_check_runs_both_move_sets_from_the_same_start():
  graph = generators.random_layered_graph(200, width=20, seed=1)
  topo = topology_lib.get("p100x4")
  row = local_search_moves.check(graph, topo, budget=120)
  assert row["plain_start"] == row["with_cut_moves_start"]
  single = simulator.simulate(graph, [0] * graph.num_nodes, topo)
  for key in ("plain_us", "with_cut_moves_us"):
    assert 0 < row[key] <= single.step_time_us
  assert row["ratio"] == row["with_cut_moves_us"] / row["plain_us"]


def test_summary_counts_per_topology():
  rows = [dict(devices="p100x4", ratio=0.9), dict(devices="p100x4", ratio=1.0),
          dict(devices="p100x4", ratio=1.1), dict(devices="p100x3", ratio=1.2)]
  assert local_search_moves.summary(rows) == [
      "p100x4: with the cut moves at or below the plain moves on 2 of 3 "
      "pairs; geometric mean 0.9967",
      "p100x3: with the cut moves at or below the plain moves on 0 of 1 "
      "pairs; geometric mean 1.2000"]


@pytest.mark.parametrize("flag", ["--graphs=bogus_graph",
                                  "--devices=p100x4,bogus"])
def test_a_bad_flag_is_one_usage_line_before_any_graph(flag, tmp_path):
  out = tmp_path / "rows.json"
  bench_flags.assert_one_usage_line("tf_gdp.bench.local_search_moves", flag, f"--json_out={out}")
  assert not out.exists()
