"""The benchmark harness: one table per topology, same simulator for all."""

import json
import math
import os
import subprocess
import sys

import pytest

from tf_gdp import errors
from tf_gdp.bench import harness

_TINY_GNMT = "gnmt:hidden_size=8:vocab_size=20:batch=2:source_length=3:target_length=3"


def test_parse_methods():
  with pytest.raises(errors.InputError, match="unknown method"):
    harness.parse_methods("all,alchemy")


def test_ratios_use_valid_rows_only():
  rows = [harness.Row("g", "d", "single_device", 3, step_time_us=100.0, valid=True,
                      lower_bound_us=40.0),
          harness.Row("g", "d", "human_expert", 3, step_time_us=80.0, valid=True,
                      lower_bound_us=40.0),
          harness.Row("g", "d", "random", 3, step_time_us=10.0, valid=False,
                      lower_bound_us=40.0)]
  harness.add_ratios(rows)
  assert rows[1].speedup_vs_single == pytest.approx(1.25)
  assert rows[0].ratio_to_expert == pytest.approx(1.25)
  assert rows[1].ratio_to_best_baseline == 1.0
  assert rows[1].ratio_to_lower_bound == pytest.approx(2.0)
  assert math.isnan(rows[2].speedup_vs_single)


def test_a_planned_order_counts_as_a_baseline_and_shows_in_the_table():
  rows = [harness.Row("g", "d", "single_device", 3, step_time_us=100.0,
                      valid=True, lower_bound_us=40.0),
          harness.Row("g", "d", "heft", 3, step_time_us=90.0, valid=True,
                      lower_bound_us=40.0, step_time_planned_us=60.0,
                      planned_valid=True),
          harness.Row("g", "d", "m_etf", 3, step_time_us=80.0, valid=True,
                      lower_bound_us=40.0, step_time_planned_us=50.0,
                      planned_valid=False)]
  harness.add_ratios(rows)
  assert rows[0].ratio_to_best_baseline == pytest.approx(100.0 / 60.0)
  table = harness.format_table(rows, "d")
  assert "planned ms" in table.splitlines()[1]
  assert "0.1!" in table  # an order that overflows memory is marked
  speedups = harness.geomean_speedups(rows)
  assert speedups["heft:planned"] == pytest.approx(100.0 / 60.0)
  assert "m_etf:planned" not in speedups


def test_bench_cli_runs_every_method_on_a_tiny_zoo_graph(tmp_path):
  out = tmp_path / "bench.json"
  result = subprocess.run(
      [sys.executable, "-m", "tf_gdp", "bench", f"--graphs={_TINY_GNMT}",
       "--devices=p100x2", "--methods=all", f"--json_out={out}"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), text=True,
      capture_output=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "devices: p100x2" in result.stdout
  document = json.loads(out.read_text())
  methods = {row["method"] for row in document["rows"]}
  assert methods == set(harness.CLASSIC_METHODS)
  for row in document["rows"]:
    assert row["valid"], row
    assert row["step_time_us"] >= row["lower_bound_us"] > 0
    assert row["search_seconds"] >= 0
    planned = row["method"] in ("m_etf", "m_sct", "heft")
    assert (row["step_time_planned_us"] is not None) == planned, row
  assert document["settings"]["devices"] == ["p100x2"]


def test_search_cost_counts_the_evaluation_that_first_reaches_hdp():
  from tf_gdp.bench import gdp_eval  # pylint: disable=g-import-not-at-top
  hdp_curve = [[10, 300.0], [40, 200.0], [90, 150.0], [100, 150.0]]
  # Zero-shot: greedy (evaluation 1) invalid, the 3rd sample reaches 150.
  gdp_curve = [[1, float("inf")], [2, 180.0], [3, 149.0], [20, 120.0]]
  cost = gdp_eval._search_cost(hdp_curve, gdp_curve, 150.0)
  assert (cost["hdp_evaluations"], cost["gdp_evaluations"]) == (90, 3)
  assert cost["ratio"] == 30.0
  never = gdp_eval._search_cost(hdp_curve, [[1, 151.0]], 150.0)
  assert never["gdp_evaluations"] is None and never["ratio"] is None


def test_quality_summary_judges_gdp_against_the_best_baseline_and_expert():
  from tf_gdp.bench import gdp_eval  # pylint: disable=g-import-not-at-top

  def result(graph, gdp, expert, best, rules=None):
    rows = [gdp_eval._row(method, step, valid, 0.0, None)
            for method, step, valid in (
                ("human_expert", expert, True), ("metis", best, True),
                ("gdp_zeroshot", gdp * 0.5, False), ("gdp", gdp, True))]
    if rules is not None:  # a baseline row of its own
      rows.append(gdp_eval._row(gdp_eval.STAGE_RULES_ROW, rules, True, 0.0, 3))
    gdp_eval._add_ratios(rows)
    return {"graph": graph, "rows": rows,
            "stage_rules": ["latest_input"] if rules is not None else []}

  summary = gdp_eval.quality_summary(
      [result("a", 80.0, 100.0, 90.0, rules=85.0),
       result("b", 120.0, 100.0, 110.0, rules=115.0)])
  assert summary["at_most_best_baseline"] == 1
  assert (summary["at_most_stage_rules"],
          summary["graphs_with_stage_rules"]) == (1, 2)
  assert summary["worst_over_best_baseline"]["graph"] == "b"
  # The rules as the best baseline: gdp is judged against them.
  assert gdp_eval.quality_summary([result("c", 80.0, 100.0, 90.0, rules=50.0)])[
      "at_most_best_baseline"] == 0
  assert summary["mean_improvement_over_expert"] == pytest.approx(0.0)
  assert summary["geomean_over_expert"] == pytest.approx((0.8 * 1.2) ** 0.5)
  assert "1 of 2 graphs" in gdp_eval.format_table([
      dict(r, search_cost={"hdp_final_us": 1.0, "hdp_evaluations": None,
                           "gdp_evaluations": None, "ratio": None})
      for r in [result("a", 80.0, 100.0, 90.0),
                result("b", 120.0, 100.0, 110.0)]])


def test_robustness_check_judges_every_method_under_the_ensemble():
  from tf_gdp.bench import robustness_check  # pylint: disable=g-import-not-at-top
  result = robustness_check.run(
      "layered:120", "p100x2", ["single_device", "round_robin"], members=3,
      finetune_seconds=0.0, samples=2, seed=0, log=lambda line: None)
  rows = {r["method"]: r for r in result["graphs"][0]["rows"]}
  assert set(rows) == {"single_device", "round_robin", "gdp_zero_shot"}
  assert rows["single_device"]["median_ratio"] == 1.0
  assert rows["single_device"]["nominal_ratio"] == 1.0
  for row in rows.values():
    assert row["members"] == 3 and row["worst_ratio"] >= row["median_ratio"]
  assert "gdp_zero_shot" in robustness_check.format_table(result)
  json.dumps(result)

