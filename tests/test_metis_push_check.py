"""The METIS push check on a small generated graph, and its flags."""

import pytest

import bench_flags  # tests/ helper
from tf_gdp.bench import metis_push_check
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators


def test_check_prices_the_cut_and_the_baseline_with_its_part_count():
  graph = generators.random_grid_graph(300)
  row = metis_push_check.check(graph, topology_lib.get("p100x4"))
  assert row["primary_devices"] == 4
  assert 1 <= row["baseline_parts"] <= 4
  assert row["cut_valid"] and row["baseline_valid"]
  assert row["cut_over_baseline"] == row["cut_us"] / row["baseline_us"]


def test_summary_counts_misses_and_those_with_fewer_parts():
  rows = [dict(cut_over_baseline=1.2, baseline_parts=2, primary_devices=4),
          dict(cut_over_baseline=1.2, baseline_parts=4, primary_devices=4),
          dict(cut_over_baseline=1.01, baseline_parts=1, primary_devices=4),
          dict(cut_over_baseline=None, baseline_parts=1, primary_devices=1)]
  assert metis_push_check.summary(rows) == (
      "the cut is more than 5% slower than METIS on 2 of 3 pairs; on 1 of "
      "them METIS used fewer parts than there are devices")


@pytest.mark.parametrize("flag", ["--graphs=bogus_graph",
                                  "--devices=p100x4,bogus"])
def test_a_bad_flag_is_one_usage_line_before_any_graph(flag, tmp_path):
  out = tmp_path / "rows.json"
  bench_flags.assert_one_usage_line("tf_gdp.bench.metis_push_check", flag, f"--json_out={out}")
  assert not out.exists()
