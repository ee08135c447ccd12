"""order_check: one graph's placements priced in every order, four judges."""

import math

import pytest

from tf_gdp.rl import policy_io  # pylint: disable=g-bad-import-order
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import order_check

TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8, "seed": 3}
METHODS = ("single_device", "m_etf", "heft", "metis")


@pytest.fixture(scope="module")
def result(tmp_path_factory):
  policy = policy_io.save_policy(
      policy_io.build_policy(TINY_POLICY),
      str(tmp_path_factory.mktemp("policy") / "policy"))
  loaded = bench_graphs.parse("cells:40")[0].load("p100x3")
  return order_check.check_graph(loaded, "cells_40", "p100x3", policy=policy,
                                 samples=4, seed=0, methods=METHODS)


def test_every_placement_is_priced_in_its_orders(result):
  assert set(result["baselines"]) == set(METHODS)
  assert set(result["baselines"]["m_etf"]) == {"default", "planned",
                                               "critical_path"}
  assert set(result["baselines"]["metis"]) == {"default", "critical_path"}
  assert set(result["gdp_zeroshot"]) == {"default", "critical_path"}


def test_the_judges_differ_only_in_the_orders_they_allow(result):
  ratios = result["ratios"]
  assert set(ratios) == set(order_check.JUDGES)
  gdp = result["gdp_zeroshot"]
  best = lambda orders: min(t for times in result["baselines"].values()
                            for o, t in times.items() if o in orders)
  assert ratios["asymmetric"] == pytest.approx(
      gdp["default"] / best({"default", "planned"}))
  assert ratios["executor"] == pytest.approx(gdp["default"] / best({"default"}))
  assert ratios["gdp_planned"] == pytest.approx(
      min(gdp.values()) / best({"default", "planned"}))
  assert ratios["all_critical_path"] == pytest.approx(
      min(gdp.values()) / best({"default", "planned", "critical_path"}))


def test_the_summary_counts_pairs_within_five_percent(result):
  summary = order_check.summary([result])["p100x3"]
  for judge, ratio in result["ratios"].items():
    assert summary[judge]["graphs"] == 1
    assert summary[judge]["within_5_percent"] == int(ratio <= 1.05)
    assert math.isclose(summary[judge]["geomean"], ratio)
