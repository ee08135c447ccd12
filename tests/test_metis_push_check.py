"""The METIS push check on a small generated graph, and its flags."""

import pytest

import bench_flags  # tests/ helper
from tf_gdp import errors
from tf_gdp.baselines import metis
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
  # Every part count from 2 is priced; all four parts is the cut itself.
  assert sorted(row["cut_us_by_parts"]) == [2, 3, 4]
  assert row["cut_us_by_parts"][4] == row["cut_us"]


def test_a_cut_into_fewer_parts_uses_only_that_many_devices():
  graph = generators.random_grid_graph(300)
  topology = topology_lib.get("p100x4")
  for parts in (2, 3):
    cut = metis.partition_devices(graph, topology, num_parts=parts)
    assert len(set(cut.tolist())) == parts and (cut >= 0).all()
  with pytest.raises(errors.InputError, match="num_parts"):
    metis.partition_devices(graph, topology, num_parts=5)


def test_summary_counts_misses_and_those_with_fewer_parts():
  rows = [dict(cut_over_baseline=1.2, baseline_parts=2, primary_devices=4),
          dict(cut_over_baseline=1.2, baseline_parts=4, primary_devices=4),
          dict(cut_over_baseline=1.01, baseline_parts=1, primary_devices=4),
          dict(cut_over_baseline=None, baseline_parts=1, primary_devices=1)]
  assert metis_push_check.summary(rows) == (
      "the cut is more than 5% slower than METIS on 2 of 3 pairs; on 1 of "
      "them METIS used fewer parts than there are devices")
  # With the cuts into fewer parts: the first row's two-part cut is within
  # 5%, its three- and four-part cuts are not; the second misses with all.
  by_parts = ({2: 100.0, 3: 130.0, 4: 120.0}, {2: 130.0, 3: None, 4: 120.0},
              {2: 101.0, 3: 101.0, 4: 101.0})
  for row, times in zip(rows, by_parts):
    row.update(cut_us_by_parts=times, baseline_us=100.0)
  assert metis_push_check.summary(rows).endswith(
      "; the fastest cut into 2 to that many parts misses on 1 of 3, the "
      "faster of the cuts into all and into one fewer on 2")


@pytest.mark.parametrize("flag", ["--graphs=bogus_graph",
                                  "--devices=p100x4,bogus"])
def test_a_bad_flag_is_one_usage_line_before_any_graph(flag, tmp_path):
  out = tmp_path / "rows.json"
  bench_flags.assert_one_usage_line("tf_gdp.bench.metis_push_check", flag, f"--json_out={out}")
  assert not out.exists()
