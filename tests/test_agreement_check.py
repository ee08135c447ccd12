"""The real-runtime benchmarks' arithmetic and tables, on made-up figures."""

import numpy as np
import pytest

from tf_gdp.bench import agreement_check
from tf_gdp.bench import confirmed_place_check
from tf_gdp.bench import keras_app_graphs


def test_summary_reports_rank_median_and_worst_error():
  summary = agreement_check._summary([110.0, 200.0, 330.0, 400.0],
                                     [100.0, 250.0, 300.0, None])
  assert summary["n"] == 3  # the failed measurement is left out
  assert summary["spearman"] == pytest.approx(1.0)
  assert summary["mape_pct"] == pytest.approx(10.0)
  assert summary["worst_pct"] == pytest.approx(20.0)
  assert summary["within_20pct"] == 3
  assert agreement_check._summary([1.0], [1.0])["spearman"] is None


def test_tables_name_every_graph_and_subset():
  s = agreement_check._summary([1.0, 2.0, 3.0], [1.0, 2.5, 2.0])
  result = {"aggregate": "median", "rounds": 3,
            "graphs": [{"graph": "g", "summary": {"profiled": s,
                                                  "profiled:methods": s}}],
            "overall": {"profiled": s, "profiled:methods": s}}
  table = agreement_check.format_table(result)
  assert "profiled:methods" in table and "pooled" in table
  runs = [{"kept": "gdp", "vs_single_device": 0.9, "vs_best_baseline": 1.0},
          {"kept": "single_device", "vs_single_device": 1.0,
           "vs_best_baseline": 1.1}]
  table = confirmed_place_check.format_table({
      "budget_seconds": 60.0, "repeats": 2,
      "graphs": [{"graph": "keras_resnet50", "nodes": 10, "runs": runs,
                  "median_vs_single_device": 0.95,
                  "median_vs_best_baseline": 1.05}]})
  assert "keras_resnet50" in table and "gdp, single_device" in table


def test_keras_applications_are_described():
  for name in keras_app_graphs.BUILDERS:
    assert "tf_keras.applications." in keras_app_graphs.describe(name)


def test_the_same_placement_under_two_names_is_measured_once():
  same_as = confirmed_place_check.distinct_placements({
      "gdp": np.array([0, 0, 0]), "single_device": [0, 0, 0],
      "m_etf": np.array([0, 1, 0]), "metis": np.array([0, 0, 0], np.int32),
      "heft": [0, 1, 0]})
  assert same_as == {"gdp": "gdp", "single_device": "gdp", "m_etf": "m_etf",
                     "metis": "gdp", "heft": "m_etf"}


def test_sweeps_measure_one_placement_once_under_all_its_names():
  calls = []

  class Result:
    valid, reason = True, None

    def __init__(self, placement):
      calls.append(tuple(placement))
      self.step_time_us = 100.0 * len(calls)

  candidates = {"all_on_0": np.array([0, 0]), "split": np.array([0, 1]),
                "method:metis": np.array([0, 0])}
  rows = [{"placement": label, "round_medians_us": [], "reasons": []}
          for label in candidates]
  agreement_check.measure_sweeps(rows, candidates, 2, Result)
  assert calls == [(0, 0), (0, 1), (0, 0), (0, 1)]
  assert rows[0]["round_medians_us"] == [100.0, 300.0]
  assert rows[2]["round_medians_us"] == [100.0, 300.0]
  assert rows[2]["same_as"] == "all_on_0" and "same_as" not in rows[0]
  assert rows[1]["round_medians_us"] == [200.0, 400.0]
