"""generalization_check: the pre-trained policy beside its controls."""

import dataclasses
import json
import math
import os
from unittest import mock

import numpy as np
import pytest

import bench_flags  # tests/ helper
# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import policy_io  # pylint: disable=g-bad-import-order
from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp.bench import bench_graphs
from tf_gdp.bench import generalization_check
from tf_gdp.bench import policy_controls
from tf_gdp.cost import topology
from tf_gdp.policy import features
from tf_gdp.rl import exploration
from tf_gdp.rl import placement_task
from tf_gdp.rl import train_config
from tf_gdp.rl import workflows
from tf_gdp.rl import zero_shot

# As in test_budget_check, with its own initialiser seed: the random
# control (seeded with the benchmark's seed, 0) must not be this policy.
TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8, "seed": 3}
SAMPLES = 16  # a zero-shot budget of 17, as in the benchmark
BUDGET = 60  # the reference, one PPO iteration and its polish fit
DEVICES = ("p100x2", "p100x3")
METHODS = ("single_device", "m_topo", "m_etf", "metis", "stage_pipeline")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("policy") / "policy")
  return policy_io.save_policy(policy_io.build_policy(TINY_POLICY), path)


@pytest.fixture(scope="module")
def results(pretrained):
  return generalization_check.run(
      bench_graphs.parse("layered:30"), DEVICES, policy_controls.POLICIES,
      pretrained=pretrained, budget=BUDGET, samples=SAMPLES, seed=0,
      methods=METHODS, log=lambda line: None)


@pytest.fixture(scope="module")
def cells_task():
  # Every third op may only run on a GPU: groups with fewer allowed devices.
  graph = bench_graphs.parse("cells:40")[0].load("p100x3").graph
  kinds = tuple(("GPU",) if i % 3 == 0 else None
                for i in range(graph.num_nodes))
  return placement_task.PlacementTask(
      dataclasses.replace(graph, device_kinds=kinds), topology.get("p100x3"),
      name="cells_40")


@pytest.fixture(scope="module")
def controls(pretrained, cells_task, tmp_path_factory):
  return policy_controls.prepare(
      policy_controls.POLICIES, pretrained,
      str(tmp_path_factory.mktemp("controls")), seed=0, task=cells_task)


def _observation(task):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  inputs = features.policy_inputs(task.graph, task.topology)
  return {k: tf.convert_to_tensor(v[None])
          for k, v in features.as_tensors(inputs).items()}


def _logits(path, task):
  policy = policy_io.load_policy(path)
  observation = _observation(task)
  return (exploration.policy_logits(policy, observation).numpy(),
          observation["allowed"].numpy()[0].astype(bool),
          observation["group_mask"].numpy()[0].astype(bool))


def test_every_field_is_there_per_graph_topology_and_policy(results):
  assert [(r["graph"], r["devices"]) for r in results] == [
      ("layered_30", d) for d in DEVICES]
  for result in results:
    assert set(result) == {
        "graph", "nodes", "devices", "best_baseline", "reference_evaluations",
        "baselines", "zeroshot_budget", "budget", "local_search",
        "local_search_evaluations_to_reach", "policies"}
    assert [b["method"] for b in result["baselines"]] == list(METHODS)
    assert result["zeroshot_budget"] == SAMPLES + 1
    assert result["budget"] == BUDGET
    assert tuple(result["policies"]) == policy_controls.POLICIES
    shot, local = (result["local_search"][k]
                   for k in ("zeroshot_budget", "budget"))
    assert (shot["budget"], local["budget"]) == (SAMPLES + 1, BUDGET)
    assert shot["method"] == local["method"] == "local_search"
    assert local["within_budget"] and local["valid"]
    for entry in result["policies"].values():
      assert set(entry) == {
          "zeroshot", "finetuned",
          "zeroshot_over_local_search_at_zeroshot_budget",
          "finetuned_over_local_search", "evaluations_to_reach",
          "reach_over_local_search"}
      zero, tuned = entry["zeroshot"], entry["finetuned"]
      assert zero["method"] == "zeroshot" and tuned["method"] == "gdp"
      assert zero["valid"] and tuned["valid"]
      assert zero["evaluations"] == zero["zeroshot_evaluations"] == 17
      assert zero["finetune_iterations"] == 0 and zero["within_budget"]
      # The fine-tuned run starts from the same zero-shot pass.
      assert tuned["curve"][:len(zero["curve"])] == zero["curve"]
      assert tuned["step_time_us"] <= zero["step_time_us"] * (1 + 1e-9)
      # PPO gets half of what the reference leaves (one iteration of 17),
      # local moves the rest (`rl.polish`).
      assert tuned["within_budget"] and tuned["finetune_iterations"] == 1
      assert tuned["evaluations"] == BUDGET
      assert tuned["reference_evaluations"] == result["reference_evaluations"]
      assert tuned["evaluations"] == (17 + tuned["reference_evaluations"] +
                                      tuned["finetune_evaluations"])


def test_ratios_are_computed_from_the_rows(results):
  for result in results:
    best = result["best_baseline"]["step_time_us"]
    shot, local = (result["local_search"][k]["step_time_us"]
                   for k in ("zeroshot_budget", "budget"))
    assert best == min(
        [b["step_time_us"] for b in result["baselines"] if b["valid"]] +
        [b["step_time_planned_us"] for b in result["baselines"]
         if b["planned_valid"]])
    for entry in result["policies"].values():
      zero, tuned = entry["zeroshot"], entry["finetuned"]
      assert zero["over_best_baseline"] == pytest.approx(
          zero["step_time_us"] / best)
      assert entry["zeroshot_over_local_search_at_zeroshot_budget"] == (
          pytest.approx(zero["step_time_us"] / shot))
      assert entry["finetuned_over_local_search"] == pytest.approx(
          tuned["step_time_us"] / local)


def _first_at_or_below(curve, target):
  return next((e for e, t in curve if t <= target * (1 + 1e-9)), None)


def test_evaluations_to_reach_follow_the_curves(results):
  for result in results:
    local = result["local_search"]["budget"]
    target = local["step_time_us"]
    reach = result["local_search_evaluations_to_reach"]
    assert reach == _first_at_or_below(local["curve"], target)
    assert 1 <= reach <= local["evaluations"]
    for entry in result["policies"].values():
      curve = entry["finetuned"]["curve"]
      found = entry["evaluations_to_reach"]
      assert found == _first_at_or_below(curve, target)
      if found is None:
        assert all(t > target for _, t in curve)
        assert entry["reach_over_local_search"] is None
      else:
        assert entry["reach_over_local_search"] == pytest.approx(
            found / reach)


def test_evaluations_to_reach():
  curve = [[1, 9.0], [5, 7.0], [9, 4.0], [12, 4.0]]
  reach = generalization_check.evaluations_to_reach
  assert reach(curve, 4.0) == 9
  assert reach(curve, 8.0) == 5
  assert reach(curve, 3.0) is None
  assert reach(curve, None) is None
  assert reach([], 4.0) is None


def test_summary_counts_the_rows(results):
  (first, second) = generalization_check.summary(results)
  assert [first["devices"], second["devices"]] == list(DEVICES)
  for block, result in ((first, results[0]), (second, results[1])):
    assert block["graphs"] == 1
    assert block["local_search_within_zeroshot_budget"] == int(
        result["local_search"]["zeroshot_budget"]["within_budget"])
    assert tuple(block["policies"]) == policy_controls.POLICIES
    for name, s in block["policies"].items():
      entry = result["policies"][name]
      zero = entry["zeroshot"]
      ratio = entry["finetuned_over_local_search"]
      assert s["graphs"] == 1
      assert s["zeroshot_valid"] == 1 and s["zeroshot_valid_on_every_graph"]
      assert s["zeroshot_within_5pct_of_best_baseline"] == int(
          zero["over_best_baseline"] <= 1.05)
      assert s["zeroshot_beats_local_search_at_zeroshot_budget"] == int(
          entry["zeroshot_over_local_search_at_zeroshot_budget"] < 1)
      assert s["finetuned_at_most_local_search"] == int(ratio <= 1 + 1e-9)
      assert s["finetuned_at_most_local_search_fraction"] == (
          s["finetuned_at_most_local_search"])
      assert s["finetuned_meets_target"] == bool(
          s["finetuned_at_most_local_search"])
      assert s["geomean_finetuned_over_local_search"] == pytest.approx(ratio)
      reached = entry["reach_over_local_search"]
      assert s["reached_local_search"] == int(
          entry["evaluations_to_reach"] is not None)
      assert s["median_reach_over_local_search"] == reached
      assert s["reach_meets_target"] == (reached is not None and
                                         reached <= 0.2)


def test_median_reach_counts_never_as_infinitely_many():
  def entry(reach):
    zero = {"valid": True, "within_budget": True, "over_best_baseline": 1.0}
    return {"zeroshot": zero, "finetuned_over_local_search": 1.0,
            "zeroshot_over_local_search_at_zeroshot_budget": 1.0,
            "evaluations_to_reach": None if reach is None else 1,
            "reach_over_local_search": reach}
  results = [{"devices": "d", "policies": {"p": entry(r)},
              "local_search": {"zeroshot_budget": {"within_budget": True}}}
             for r in (0.1, None, None)]
  (block,) = generalization_check.summary(results)
  s = block["policies"]["p"]
  assert s["median_reach_over_local_search"] is None
  assert not s["reach_meets_target"] and s["reached_local_search"] == 1
  results[1]["policies"]["p"] = entry(0.3)
  s = generalization_check.summary(results)[0]["policies"]["p"]
  assert s["median_reach_over_local_search"] == pytest.approx(0.3)


def test_table_has_a_block_per_topology_and_the_summary(results):
  table = generalization_check.format_table(results)
  assert table.count("devices: ") == len(DEVICES)
  for name in policy_controls.POLICIES:
    for devices in DEVICES:
      assert f"{devices} {name}: zero-shot valid on 1 of 1" in table
  assert "layered_30: best baseline" in table and "target 75%" in table


def test_uniform_logits_are_uniform_over_allowed_devices(controls, cells_task):
  uniform, allowed, real = _logits(controls["uniform"], cells_task)
  pretrained, _, _ = _logits(controls["pretrained"], cells_task)
  assert real.sum() > 1 and (~allowed[real]).any()  # some devices refused
  assert np.all(uniform[real] == np.where(allowed[real], 0.0, -1e9))
  probabilities = np.exp(uniform[real]) / np.exp(uniform[real]).sum(
      -1, keepdims=True)
  expected = allowed[real] / allowed[real].sum(-1, keepdims=True)
  np.testing.assert_allclose(probabilities, expected, atol=1e-6)
  # The pre-trained policy's scores do differ between allowed devices.
  spread = np.where(allowed[real], pretrained[real], np.nan)
  assert np.nanmax(np.nanstd(spread, axis=-1)) > 1e-3
  # Zero-shot: its greedy placement is every group on its first allowed
  # device; its samples differ from the pre-trained policy's.
  shots = {name: zero_shot.zeroshot(controls[name], cells_task,
                                    samples=SAMPLES, seed=0)
           for name in ("pretrained", "uniform")}
  first_allowed = np.argmax(allowed[real], axis=-1)
  greedy = _greedy_groups(controls["uniform"], cells_task)
  np.testing.assert_array_equal(greedy, first_allowed)
  assert not np.array_equal(greedy,
                            _greedy_groups(controls["pretrained"], cells_task))
  assert not np.array_equal(shots["uniform"].sample_step_times_us,
                            shots["pretrained"].sample_step_times_us)


def _greedy_groups(path, task):
  logits, _, real = _logits(path, task)
  return np.argmax(logits[real], axis=-1)


def test_uniform_logits_stay_uniform_through_fine_tuning(controls, cells_task,
                                                         tmp_path):
  workflows.finetune(controls["uniform"], cells_task,
                     budget=train_config.Budget(iterations=1),
                     root_dir=str(tmp_path / "tuned"),
                     config=train_config.TrainConfig(
                         graphs_per_iteration=1, samples_per_graph=4,
                         checkpoint_every_seconds=1e9))
  tuned = str(tmp_path / "tuned" / "policy")
  assert float(policy_io.load_policy(tuned).logit_scale.numpy()) == 0.0
  logits, allowed, real = _logits(tuned, cells_task)
  assert np.all(logits[real] == np.where(allowed[real], 0.0, -1e9))


def test_random_policy_is_a_fresh_one_with_the_same_config(
    controls, pretrained, cells_task, tmp_path):
  read = lambda path: policy_io.read_policy_config(
      os.path.join(path, policy_io.POLICY_CONFIG_FILE))
  assert controls["pretrained"] == pretrained
  assert read(controls["random"]) == dict(read(pretrained), seed=0)
  assert read(controls["uniform"]) == read(pretrained)
  random, _, real = _logits(controls["random"], cells_task)
  trained, _, _ = _logits(pretrained, cells_task)
  assert not np.allclose(random[real], trained[real])
  # Saved with its weights, and the same for the same seed.
  again = policy_controls.prepare(["random"], pretrained, str(tmp_path),
                                  seed=0, task=cells_task)
  np.testing.assert_array_equal(_logits(again["random"], cells_task)[0],
                                random)


def test_policies_and_devices_parse():
  assert policy_controls.parse(["uniform", "pretrained"]) == [
      "uniform", "pretrained"]
  for bad in (["bogus"], [], ["random", "random"], [" "]):
    with pytest.raises(errors.InputError, match="policies must be"):
      policy_controls.parse(bad)
  assert generalization_check.parse_devices(["p100x4", "p100x3"]) == [
      "p100x4", "p100x3"]
  for bad in (["p100x4", "p100x4"], [], ["no_such_box"]):
    with pytest.raises(errors.InputError):
      generalization_check.parse_devices(bad)


def test_results_json_is_written_atomically(results, tmp_path, monkeypatch):
  spy = mock.Mock(wraps=fileio.write_atomically)
  monkeypatch.setattr(fileio, "write_atomically", spy)
  out = str(tmp_path / "generalization.json")
  generalization_check.write_results(results, {"budget": BUDGET}, 0.0, out)
  spy.assert_called_once_with(out, mock.ANY)
  assert os.listdir(tmp_path) == ["generalization.json"]
  document = json.loads((tmp_path / "generalization.json").read_text())
  assert document["benchmark"] == "generalization_check"
  assert document["results"]["graphs"] == json.loads(json.dumps(results))
  assert document["results"]["targets"] == {
      "zeroshot_over_best_baseline": 1.05,
      "finetuned_at_most_local_search_fraction": 0.75,
      "median_reach_over_local_search": 0.2}
  assert len(document["results"]["summary"]) == len(DEVICES)
  assert not any(isinstance(v, float) and not math.isfinite(v)
                 for v in _leaves(document))


def _leaves(value):
  if isinstance(value, dict):
    for item in value.values():
      yield from _leaves(item)
  elif isinstance(value, list):
    for item in value:
      yield from _leaves(item)
  else:
    yield value


@pytest.mark.parametrize("flag", ["--policies=pretrained,bogus",
                                  "--policy=/bogus/policy"])
def test_a_bad_policy_flag_is_one_usage_line(flag):
  stderr = bench_flags.assert_one_usage_line(
      "tf_gdp.bench.generalization_check", flag)
  assert "Generalization" not in stderr  # not the whole usage text
