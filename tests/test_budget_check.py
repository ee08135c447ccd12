"""budget_check: GDP, local search and HDP at equal evaluation budgets."""

import json
import math
import os
import subprocess
import sys

import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import policy_io  # pylint: disable=g-bad-import-order
from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import budget_check
from tf_gdp.bench import gdp_eval
from tf_gdp.bench import gdp_search
from tf_gdp.bench import harness
from tf_gdp.cost import simulator
from tf_gdp.cost import topology

TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8}
SAMPLES = 4
BUDGETS = (24, 48)
HDP_DEFAULT = 48  # one of BUDGETS: the same search, run once
DEVICES = "p100x2"


@pytest.fixture(scope="module")
def loaded():
  return bench_graphs.parse("layered:30")[0].load(DEVICES)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("policy") / "policy")
  return policy_io.save_policy(policy_io.build_policy(TINY_POLICY), path)


@pytest.fixture(scope="module")
def result(loaded, tiny_policy):
  return budget_check.check_graph(
      loaded, "layered_30", DEVICES, budgets=BUDGETS, policy=tiny_policy,
      samples=SAMPLES, seed=0, methods=("single_device", "m_topo", "metis"),
      hdp_default_budget=HDP_DEFAULT, log=lambda line: None)


def _rows(result):
  for entry in result["budgets"]:
    yield from entry["rows"]
  yield result["hdp_default"]


def test_every_search_keeps_to_its_budget(result):
  assert [e["budget"] for e in result["budgets"]] == list(BUDGETS)
  per_iteration = SAMPLES + 1  # samples and the greedy placement
  for entry in result["budgets"]:
    budget = entry["budget"]
    by_method = {r["method"]: r for r in entry["rows"]}
    assert tuple(by_method) == budget_check.SEARCHES + ("auto",)
    assert all(r["within_budget"] and r["budget"] == budget
               for r in entry["rows"])
    # auto keeps the fastest of gdp, local_search and the one-shot rows.
    auto = by_method["auto"]
    one_shot = [r["step_time_us"] for r in result["baselines"] if r["valid"]]
    assert auto["step_time_us"] == min(
        [by_method["gdp"]["step_time_us"],
         by_method["local_search"]["step_time_us"]] + one_shot)
    assert auto["evaluations"] >= (by_method["gdp"]["evaluations"] +
                                   by_method["local_search"]["evaluations"])
    # Local search and HDP cut their last round / batch to the budget.
    assert by_method["local_search"]["evaluations"] == budget
    assert by_method["hdp"]["evaluations"] == budget
    gdp = by_method["gdp"]
    assert budget - per_iteration < gdp["evaluations"] <= budget
    assert gdp["zeroshot_evaluations"] == 1 + SAMPLES
    assert gdp["evaluations"] == (gdp["zeroshot_evaluations"] +
                                  gdp["reference_evaluations"] +
                                  gdp["finetune_evaluations"])
    # PPO's whole iterations, then the polish's local moves to the budget.
    assert gdp["finetune_iterations"] > 0
    assert gdp["finetune_evaluations"] > (per_iteration *
                                          gdp["finetune_iterations"])
    assert gdp["evaluations"] == budget
    assert entry["gdp_over_local_search"] == pytest.approx(
        gdp["step_time_us"] / by_method["local_search"]["step_time_us"])
  assert result["hdp_default"] == result["budgets"][1]["rows"][2]


def test_gdp_is_charged_for_its_reward_reference(result):
  # No expert rules on a generated graph: the reference is single_device,
  # its own search plus the simulation that chose it.
  single = next(r for r in result["baselines"]
                if r["method"] == "single_device")
  assert result["reference_evaluations"] == single["evaluations"] + 1 > 1
  for entry in result["budgets"]:
    assert entry["rows"][0]["reference_evaluations"] == (
        result["reference_evaluations"])


def test_curves_are_best_so_far_and_end_at_the_result(result):
  for row in _rows(result):
    curve = row["curve"]
    assert curve, row["method"]
    counts = [e for e, _ in curve]
    values = [t for _, t in curve]
    assert counts == sorted(set(counts)) and counts[-1] <= row["evaluations"]
    assert all(b <= a for a, b in zip(values, values[1:])), row["method"]
    assert all(math.isfinite(t) for t in values)
    assert row["valid"]
    assert values[-1] == pytest.approx(row["step_time_us"], rel=1e-6)
    assert row["over_best_baseline"] == pytest.approx(
        row["step_time_us"] / result["best_baseline"]["step_time_us"])


def test_gdp_is_reproducible(result, loaded, tiny_policy):
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import zero_shot  # pylint: disable=g-import-not-at-top
  first = result["budgets"][0]["rows"][0]
  task = placement_task.PlacementTask(loaded.graph, topology.get(DEVICES),
                                      name="layered_30")
  shot = zero_shot.zeroshot(tiny_policy, task, samples=SAMPLES, seed=0)
  again = gdp_search.run(
      tiny_policy, task, samples=SAMPLES, seed=0, shot=shot,
      finetune_evaluations=first["finetune_evaluations"],
      reference_evaluations=first["reference_evaluations"])
  assert harness.finite_curve(again.curve) == first["curve"]
  assert again.step_time_us == pytest.approx(first["step_time_us"])


def test_table_and_summary(result):
  table = budget_check.format_table([result])
  assert "gdp/ls" in table and "hdp(default)" in table
  assert "budget 24: gdp <= local_search on" in table
  summary = budget_check.summary([result])
  assert [s["budget"] for s in summary] == list(BUDGETS)
  assert all(s["all_within_budget"] and s["graphs"] == 1 for s in summary)


def test_results_json_is_written_atomically(result, tmp_path, monkeypatch):
  writes = []
  real = fileio.write_atomically

  def spy(path, data):
    writes.append(path)
    real(path, data)

  monkeypatch.setattr(fileio, "write_atomically", spy)
  out = str(tmp_path / "budgets.json")
  budget_check.write_results([result], {"budgets": list(BUDGETS)}, 0.0, out)
  assert writes == [out] and os.listdir(tmp_path) == ["budgets.json"]
  document = json.loads((tmp_path / "budgets.json").read_text())
  assert document["benchmark"] == "budget_check"
  graph = document["results"]["graphs"][0]
  assert graph["budgets"][1]["rows"][0]["curve"] == (
      result["budgets"][1]["rows"][0]["curve"])


def test_budgets_parse_and_fine_tuning_never_passes_its_budget():
  assert budget_check.parse_budgets(["2000", "500", "500"]) == [500, 2000]
  for bad in (["0"], ["x"], []):
    with pytest.raises(errors.InputError):
      budget_check.parse_budgets(bad)
  config = gdp_search.train_settings(16, 0)
  assert gdp_search.iteration_evaluations(config) == 17
  budget = gdp_search.finetune_budget(config, evaluations=100)
  assert (budget.evaluations, budget.iterations) == (100, 5)  # 85 used
  assert gdp_search.finetune_budget(config, evaluations=16) is None
  assert gdp_search.finetune_budget(config, seconds=0.0) is None
  assert gdp_search.finetune_budget(config, seconds=5.0).seconds == 5.0
  with pytest.raises(errors.InputError, match="not both"):
    gdp_search.finetune_budget(config, seconds=5.0, evaluations=100)


def test_gdp_eval_refuses_both_fine_tuning_budgets(loaded):
  with pytest.raises(errors.InputError, match="not both"):
    gdp_eval.evaluate_graph(loaded, "g", DEVICES, policy="unused",
                            finetune_seconds=1.0, finetune_evaluations=10,
                            hdp_budget=8, samples=SAMPLES, seed=0)
  run = subprocess.run(
      [sys.executable, "-m", "tf_gdp.bench.gdp_eval", "--finetune_seconds=1",
       "--finetune_evaluations=10"], capture_output=True, text=True,
      timeout=300, check=False)
  assert run.returncode != 0
  assert "finetune_seconds" in run.stderr and "finetune_evaluations" in (
      run.stderr)


def test_graph_sets_name_built_graphs_and_refuse_repeats():
  sources = bench_graphs.parse("lstm,layered:30,keras_resnet50")
  assert [s.label for s in sources] == ["layered_30", "lstm", "keras_resnet50"]
  assert isinstance(sources[1], bench_graphs.BuiltGraph)
  with pytest.raises(errors.InputError, match="twice"):
    bench_graphs.parse("lstm,lstm")
  for bad in ("no_such_graph", " , "):
    with pytest.raises(errors.InputError):
      bench_graphs.parse(bad)


def test_one_shot_baselines_report_their_evaluations(loaded):
  rows = harness.bench_graph(loaded, "g", DEVICES, ("single_device", "metis"))
  assert all(r.evaluations >= 1 for r in rows)  # both simulate candidates
  assert harness.best_row(rows)[1] == min(r.step_time_us for r in rows)


@pytest.mark.parametrize("mode", ["default", "none"])
def test_hdp_runs_only_where_asked(loaded, tiny_policy, mode):
  result = budget_check.check_graph(
      loaded, "layered_30", DEVICES, budgets=BUDGETS, policy=tiny_policy,
      samples=SAMPLES, seed=0, methods=("single_device", "m_topo"),
      hdp_default_budget=HDP_DEFAULT, hdp_mode=mode, log=lambda line: None)
  methods = [[r["method"] for r in e["rows"]] for e in result["budgets"]]
  if mode == "default":
    assert methods == [["gdp", "local_search", "auto"],
                       ["gdp", "local_search", "hdp", "auto"]]
    assert result["hdp_default"] is result["budgets"][1]["rows"][2]
    assert result["budgets"][0]["hdp_over_local_search"] is None
  else:
    assert methods == [["gdp", "local_search", "auto"]] * 2
    assert result["hdp_default"] is None
  table = budget_check.format_table([result])
  assert ("hdp(default)" in table) == (mode == "default")
  with pytest.raises(errors.InputError, match="hdp mode"):
    budget_check.check_graph(loaded, "x", DEVICES, budgets=BUDGETS,
                             policy=tiny_policy, samples=SAMPLES, seed=0,
                             hdp_mode="some")


def test_the_polish_spends_the_rest_of_the_budget_and_never_worsens(
    loaded, tiny_policy):
  from tf_gdp.rl import placement_task  # pylint: disable=g-import-not-at-top
  from tf_gdp.rl import zero_shot  # pylint: disable=g-import-not-at-top
  task = placement_task.PlacementTask(loaded.graph, topology.get(DEVICES),
                                      name="layered_30")
  shot = zero_shot.zeroshot(tiny_policy, task, samples=SAMPLES, seed=0)
  runs = {share: gdp_search.run(tiny_policy, task, samples=SAMPLES, seed=0,
                                shot=shot, finetune_evaluations=60,
                                polish_share=share)
          for share in (0.0, 0.5)}
  ppo_only, polished = runs[0.0], runs[0.5]
  # Half the budget is PPO's (whole iterations of 1 + SAMPLES), the rest
  # local moves, so the polished run uses all 60.
  assert ppo_only.finetune_evaluations <= 60
  assert polished.finetune_evaluations == 60
  assert polished.finetune_iterations == 30 // (1 + SAMPLES)
  values = [t for _, t in polished.curve]
  assert all(b <= a for a, b in zip(values, values[1:]))
  assert polished.curve[-1][0] <= polished.evaluations
  judged = simulator.simulate(loaded.graph, polished.placement,
                              topology.get(DEVICES))
  assert judged.valid
  assert judged.step_time_us == pytest.approx(polished.step_time_us)
  assert polished.step_time_us <= values[0]
