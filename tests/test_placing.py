"""placing (one graph, one method) and place_batch (many graphs, folders)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

# tf_gdp.rl first: it imports tf-agents and repairs tf.keras after it.
from tf_gdp.rl import policy_io  # pylint: disable=g-bad-import-order
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import place_batch
from tf_gdp import placement_file
from tf_gdp import placing
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators
from tf_gdp.graph import json_io
from tf_gdp.graph import op_graph

TINY_POLICY = {"hidden_size": 16, "op_embedding_size": 4, "gnn_rounds": 1,
               "placer_layers": 1, "num_heads": 2, "ffn_size": 32,
               "segment_length": 8, "memory_length": 8}


@pytest.fixture(scope="module")
def graph():
  return generators.random_layered_graph(120, width=6, seed=1, name="lay")


@pytest.fixture(scope="module")
def topology():
  return topology_lib.get("p100x2")


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("policy") / "policy")
  return policy_io.save_policy(policy_io.build_policy(TINY_POLICY), path)


def test_baseline_result_is_judged_and_compared(graph, topology):
  result = placing.place(graph, topology, "metis",
                         compare=("single_device", "round_robin"))
  assert result.placement.shape == (graph.num_nodes,)
  assert result.valid and result.step_time_us > 0
  assert result.step_time_us >= result.lower_bound_us
  assert set(result.compared) == {"single_device", "round_robin"}
  report = result.report()
  assert report["method"] == "metis" and len(report["peak_memory_bytes"]) == 3
  json.dumps(report)  # JSON-able


def test_a_preset_report_judges_robustness_to_cost_model_error(graph,
                                                               topology):
  result = placing.place(graph, topology, "metis",
                         compare=("single_device", "round_robin"),
                         robust_members=4)
  robust = result.report()["robustness"]
  assert robust["members"] == 4
  assert robust["worst_ratio"] >= robust["median_ratio"] > 0
  assert robust["median_step_time_us"] > 0
  single = result.compared["single_device"]["robustness"]
  assert single["median_ratio"] == single["worst_ratio"] == 1.0
  assert result.compared["round_robin"]["robustness"]["members"] == 4
  json.dumps(result.report())
  off = placing.place(graph, topology, "metis", compare=("single_device",),
                      robust_members=0)
  assert off.report()["robustness"] is None
  assert "robustness" not in off.compared["single_device"]
  # Attached devices are measured, not judged by an ensemble.
  local = placing.place(graph, topology_lib.get("local-cpus:2"), "round_robin",
                        compare=())
  assert local.robustness is None
  with pytest.raises(errors.InputError, match="robust objective"):
    placing.place(graph, topology, "metis", robust_objective=True)


def test_list_schedulers_are_judged_also_as_planned(graph, topology):
  result = placing.place(graph, topology, "heft", compare=("m_etf", "metis"))
  assert result.step_time_planned_us > 0 and result.planned_valid is not None
  report = result.report()
  assert report["step_time_planned_us"] == result.step_time_planned_us
  assert report["compared"]["m_etf"]["step_time_planned_us"] > 0
  assert "step_time_planned_us" not in report["compared"]["metis"]
  plain = placing.judge(graph, topology, "loaded", result.placement)
  assert plain.step_time_planned_us is None
  assert plain.step_time_us == result.step_time_us


def test_bad_method_budget_and_missing_policy(graph, topology, tmp_path):
  with pytest.raises(errors.InputError, match="unknown method 'magic'"):
    placing.place(graph, topology, "magic")
  with pytest.raises(errors.InputError, match="not a baseline"):
    placing.place(graph, topology, "metis", compare=("gdp",))
  with pytest.raises(errors.InputError, match="no policy at"):
    placing.place(graph, topology, "gdp", policy=str(tmp_path / "none"))


def test_gdp_zero_shot_is_valid_and_deterministic(graph, topology,
                                                  tiny_policy):
  first = placing.place(graph, topology, "gdp", policy=tiny_policy, seed=3,
                        samples=4, compare=())
  again = placing.place(graph, topology, "gdp", policy=tiny_policy, seed=3,
                        samples=4, compare=())
  assert first.valid and first.details["mode"] == "zero-shot"
  assert first.evaluations == 5
  np.testing.assert_array_equal(first.placement, again.placement)


def test_gdp_fine_tune_never_returns_worse_than_zero_shot(graph, topology,
                                                          tiny_policy):
  result = placing.place(graph, topology, "gdp", policy=tiny_policy,
                         budget_seconds=3.0, samples=4, compare=())
  assert result.details["mode"] == "fine-tune"
  assert result.details["finetune_iterations"] >= 1
  assert result.step_time_us <= result.details["zero_shot_step_time_us"] + 1e-6


def test_gdp_places_under_a_callers_mixed_precision_policy(graph, topology,
                                                          tiny_policy):
  # A training script's global mixed_float16 policy must not reach the
  # policy network's layers, and is the caller's again afterwards.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  precision = tf.keras.mixed_precision
  precision.set_global_policy("mixed_float16")
  try:
    result = placing.place(graph, topology, "gdp", policy=tiny_policy,
                           samples=4, compare=())
    assert precision.global_policy().name == "mixed_float16"
  finally:
    precision.set_global_policy("float32")
  assert result.valid


def test_gdp_does_not_fine_tune_a_step_that_takes_no_time(topology,
                                                         tiny_policy):
  # Constants only: every op is free, so one device takes no time and no
  # reward could be told from another.
  free = op_graph.OpGraph.build(
      name="constants", node_names=["a", "b", "c"], op_types=["Const"] * 3,
      costs={"GPU": [0.0] * 3, "CPU": [0.0] * 3}, output_bytes=[4] * 3,
      memory_bytes=[4] * 3, edge_src=[], edge_dst=[], edge_bytes=[])
  result = placing.place(free, topology, "gdp", policy=tiny_policy,
                         budget_seconds=3.0, samples=4, compare=())
  assert result.valid and result.step_time_us == 0.0
  assert result.details["mode"] == "zero-shot"
  assert "finetune_skipped" in result.details


def test_gdp_fine_tune_ends_with_local_moves_within_its_budget(
    graph, topology, tiny_policy):
  result = placing.place(graph, topology, "gdp", policy=tiny_policy,
                         budget_evaluations=40, samples=4, compare=())
  details = result.details
  # PPO's half of the 40 (whole iterations of 5, the last may pass it; a
  # placement drawn again is not counted), then local moves with what is
  # left; zero-shot's 5 come first.
  assert 20 <= details["finetune_evaluations"] <= (
      details["finetune_iterations"] * 5)
  assert details["polish_evaluations"] == 40 - details["finetune_evaluations"]
  assert result.evaluations == 5 + 40
  assert result.valid
  assert result.step_time_us == pytest.approx(details["polish_step_time_us"])
  assert result.step_time_us <= min(details["zero_shot_step_time_us"],
                                    details["finetune_step_time_us"]) + 1e-6


def test_gdp_fine_tune_can_optimise_the_ensemble_median(graph, topology,
                                                        tiny_policy):
  result = placing.place(graph, topology, "gdp", policy=tiny_policy,
                         budget_seconds=3.0, samples=4, compare=(),
                         robust_members=3, robust_objective=True)
  assert result.details["finetune_objective"] == "ensemble_median"
  assert result.robustness["members"] == 3


def test_placement_file_round_trip_and_mismatches(graph, topology, tmp_path):
  result = placing.place(graph, topology, "round_robin", compare=())
  path = str(tmp_path / "p.json")
  placing.save(result, graph, path)
  np.testing.assert_array_equal(placement_file.load(graph, topology, path),
                                result.placement)
  other = generators.random_layered_graph(50, width=5, seed=2, name="other")
  with pytest.raises(errors.PlacementError, match="does not match graph"):
    placement_file.load(other, topology, path)
  with pytest.raises(errors.PlacementError, match="does not have"):
    placement_file.load(graph, topology_lib.get("cpu-workers:2"), path)
  (tmp_path / "junk.json").write_text("[1, 2")
  with pytest.raises(errors.InputError, match="not a placement JSON"):
    placement_file.load(graph, topology, str(tmp_path / "junk.json"))


def test_batch_keeps_good_graphs_when_one_is_bad(graph, tmp_path):
  graphs = tmp_path / "graphs"
  graphs.mkdir()
  json_io.save_json(graph, str(graphs / "a.json"))
  json_io.save_json(generators.random_layered_graph(60, width=4, seed=5,
                                                    name="b"),
                    str(graphs / "b.json"))
  (graphs / "broken.json").write_text('{"format": ')
  out = tmp_path / "out"
  outcomes = place_batch.place_many(str(graphs / "*.json"), "p100x2", str(out),
                                    method="m_etf", compare=("single_device",),
                                    pictures=False)
  assert [o.label for o in outcomes] == ["a.json", "b.json", "broken.json"]
  assert [o.error is None for o in outcomes] == [True, True, False]
  for label in ("a.json", "b.json"):
    files = sorted(os.listdir(out / label))
    assert files == ["placement.json", "report.json"]  # no temp files left
  assert not (out / "broken.json").exists()
  table = place_batch.format_summary(outcomes, "p100x2", "m_etf")
  assert "2 placed, 1 failed" in table and "FAILED" in table


def test_batch_with_a_bad_policy_or_compare_fails_before_any_graph(graph,
                                                                  tmp_path):
  json_io.save_json(graph, str(tmp_path / "a.json"))
  broken = tmp_path / "broken_policy"
  broken.mkdir()
  (broken / policy_io.POLICY_CONFIG_FILE).write_text("{not json")
  lines = []
  for policy, message in ((str(tmp_path / "none"), "no policy at"),
                          (str(broken), "unreadable policy config")):
    with pytest.raises(errors.InputError, match=message):
      place_batch.place_many(str(tmp_path / "*.json"), "p100x2",
                             str(tmp_path / "out"), policy=policy,
                             log=lines.append)
  assert not lines and not (tmp_path / "out").exists()
  with pytest.raises(errors.InputError, match="not a baseline; choose from"):
    place_batch.place_many(str(tmp_path / "*.json"), "p100x2",
                           str(tmp_path / "out"), compare=["expert"],
                           log=lines.append)
  assert not lines and not (tmp_path / "out").exists()


def test_placed_meta_graph_carries_the_devices(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top

  @tf.function
  def step(x):
    return tf.matmul(tf.tanh(x), x)

  extracted = extract.from_function(step, tf.ones([4, 4]))
  loaded = graph_specs.LoadedGraph(graph_specs.op_graph_from_extracted(
      extracted, name="mm", devices="p100x2"), extracted)
  result = placing.place(loaded.graph, topology_lib.get("p100x2"),
                         "round_robin", compare=())
  path = str(tmp_path / "placed.pb")
  place_batch.write_placed_meta_graph(
      extracted, result.device_map(loaded.graph), path)
  meta = tf.compat.v1.MetaGraphDef.FromString(open(path, "rb").read())
  placed = {n.name: n.device for n in meta.graph_def.node}
  for op, device in result.device_map(loaded.graph).items():
    if op in placed:
      assert placed[op] == device


def test_write_graph_of_an_op_graph_file_is_refused_before_any_output(
    graph, tmp_path):
  json_io.save_json(graph, str(tmp_path / "g.json"))
  out = tmp_path / "out"
  result = subprocess.run(
      [sys.executable, "-m", "tf_gdp", "place", f"--graphs={tmp_path}/g.json",
       "--devices=p100x2", "--method=metis", "--compare=", "--write_graph",
       f"--out={out}"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), text=True,
      capture_output=True, timeout=300, check=False)
  assert result.returncode == 2, result.stderr
  assert "no TensorFlow graph to write" in result.stderr
  assert not [f for _, _, files in os.walk(out) for f in files]


def test_cli_places_a_glob_and_reports_the_bad_file(graph, tmp_path):
  json_io.save_json(graph, str(tmp_path / "good.json"))
  (tmp_path / "bad.json").write_text("not json")
  out = tmp_path / "out"
  result = subprocess.run(
      [sys.executable, "-m", "tf_gdp", "place",
       f"--graphs={tmp_path}/*.json", "--devices=p100x2", "--method=metis",
       "--nopictures", "--compare=single_device", "--robust_members=3",
       f"--out={out}"],
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), text=True,
      capture_output=True, timeout=300, check=False)
  assert result.returncode == 2, result.stderr
  assert "1 placed, 1 failed" in result.stdout
  # The file is named once, by the path its error opens with.
  assert result.stderr.strip().splitlines()[-1].startswith(
      f"error: 1 of 2 graphs failed (first: {tmp_path}/bad.json: invalid JSON")
  assert "Traceback" not in result.stderr
  document = json.loads((out / "good.json" / "placement.json").read_text())
  assert len(document["placement"]) == graph.num_nodes
  report = json.loads((out / "good.json" / "report.json").read_text())
  assert report["robustness"]["members"] == 3
  assert report["compared"]["single_device"]["robustness"]["worst_ratio"] == 1


def test_cli_measure_runs_a_placement_file_and_refuses_json(graph, tmp_path):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  model = "rnnlm2:hidden_size=16:vocab_size=50:batch=2:num_steps=2"
  out = tmp_path / "out"
  subprocess.run([sys.executable, "-m", "tf_gdp", "place", f"--graphs={model}",
                  "--devices=local-cpus:2", "--method=round_robin",
                  "--nopictures", "--compare=", f"--out={out}"], env=env,
                 check=True, capture_output=True, timeout=300)
  placement = next(out.glob("*/placement.json"))
  ran = subprocess.run([sys.executable, "-m", "tf_gdp", "measure",
                        f"--graph={model}", "--devices=local-cpus:2",
                        f"--placement={placement}", "--repeats=2"], env=env,
                       text=True, capture_output=True, timeout=300,
                       check=False)
  assert ran.returncode == 0, ran.stderr
  assert "predicted" in ran.stdout and "measured" in ran.stdout
  json_io.save_json(graph, str(tmp_path / "g.json"))
  refused = subprocess.run([sys.executable, "-m", "tf_gdp", "measure",
                            f"--graph={tmp_path / 'g.json'}"], env=env,
                           text=True, capture_output=True, timeout=300,
                           check=False)
  assert refused.returncode == 2
  assert "has no TensorFlow graph to run" in refused.stderr


def test_safe_names_stay_inside_the_output_folder():
  from tf_gdp.graph import identity  # pylint: disable=g-import-not-at-top
  for name in ("..", ".", "", "...", "../x", "a/../../b"):
    safe = identity.safe_name(name)
    assert safe not in (".", "..", "") and "/" not in safe, (name, safe)
  assert identity.safe_name("gnmt2:batch=8") == "gnmt2_batch_8"


def test_saved_model_in_placed_saved_model_out(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top

  class Model(tf.Module):

    def __init__(self):
      super().__init__()
      self.w = tf.Variable(tf.random.stateless_normal([8, 8], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([4, 8], tf.float32)])
    def __call__(self, x):
      return {"y": tf.tanh(tf.matmul(tf.tanh(tf.matmul(x, self.w)), self.w))}

  model = Model()
  source = str(tmp_path / "model")
  tf.saved_model.save(model, source, signatures={"serving_default":
                                                 model.__call__})
  loaded = graph_specs.load(source, devices="local-cpus:2")
  assert loaded.saved_model_signature == "serving_default"
  topology = topology_lib.get("local-cpus:2")
  result = placing.place(loaded.graph, topology, "round_robin", compare=())
  assert len(set(result.placement.tolist())) == 2
  out = tmp_path / "out"
  place_batch.write_outputs(str(out), loaded, topology, result,
                            pictures=False, write_graph=True)
  assert (out / "placed_graph.pb").is_file()
  saved = saved_model_pb2.SavedModel.FromString(
      (out / "placed_saved_model" / "saved_model.pb").read_bytes())
  devices = {node.device for meta in saved.meta_graphs
             for function in meta.graph_def.library.function
             for node in function.node_def}
  assert any(d.endswith("CPU:1") for d in devices), devices
  reloaded = tf.saved_model.load(str(out / "placed_saved_model"))
  serve = reloaded.signatures["serving_default"]
  assert list(serve.structured_input_signature[1]) == ["x"]  # the source's
  x = tf.random.stateless_normal([4, 8], seed=[3, 4])
  np.testing.assert_allclose(serve(x=x)["y"].numpy(),
                             model(x)["y"].numpy(), rtol=1e-5, atol=1e-6)
  # Placed again without --write_graph: no graph of the old placement stays.
  place_batch.write_outputs(str(out), loaded, topology, result,
                            pictures=False, write_graph=False)
  assert (out / "placement.json").is_file()
  assert not (out / "placed_graph.pb").exists()
  assert not (out / "placed_saved_model").exists()
