"""Ops priced by a profile on the target, cached; links measured on first use."""

import json

import numpy as np
import pytest

from tf_gdp import graph_specs
from tf_gdp import place_batch
from tf_gdp.cost import runtime_costs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators
from tf_gdp.runtime import calibrate
from tf_gdp.runtime import measure
from tf_gdp.runtime import profiled_costs


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path / "home"))


def test_targets_are_the_devices_that_are_here():
  target = lambda name: profiled_costs.target_for(topology_lib.get(name))
  assert target("local-cpus:2") == "local"
  assert target("cpu-workers:3") == "cpu-workers:3"
  assert target("p100x4") is None


def test_a_tensorflow_graph_is_priced_by_its_profile(train_step_saved_model):
  loaded = graph_specs.load(train_step_saved_model, devices="local-cpus:2")
  topology = topology_lib.get("local-cpus:2")
  graph, info = profiled_costs.profiled_graph(loaded.graph, loaded.extracted,
                                              topology)
  assert info["source"] == "profiled" and info["target"] == "local"
  assert not info["cached"]
  assert info["profiled_ops"] > 0
  assert info["profiled_ops"] + info["roofline_ops"] == graph.num_nodes
  assert graph.metadata["cost_source"]["CPU"] == "profiled:CPU"
  assert graph.node_names == loaded.graph.node_names
  assert not np.array_equal(graph.costs["CPU"], loaded.graph.costs["CPU"])
  again, info = profiled_costs.profiled_graph(loaded.graph, loaded.extracted,
                                              topology)
  assert info["cached"]
  np.testing.assert_array_equal(again.costs["CPU"], graph.costs["CPU"])


def test_a_profile_is_stored_times_the_device_speed(train_step_saved_model,
                                                    monkeypatch):
  loaded = graph_specs.load(train_step_saved_model, devices="local-cpus:2")
  base = topology_lib.get("local-cpus:2")
  names = list(loaded.graph.node_names)
  monkeypatch.setattr(
      "tf_gdp.runtime.measure.profile",
      lambda extracted, target, **kwargs: measure.OpProfile(
          {names[0]: 10.0, names[1]: 4.0}, step_time_us=14.0))
  fast = topology_lib.custom(
      base.name, [topology_lib.Device(d.name, d.kind, d.memory_bytes, 2.5)
                  for d in base.devices],
      base.bandwidth_gbps, base.latency_us, base.hardware)
  graph, info = profiled_costs.profiled_graph(
      loaded.graph, loaded.extracted, fast, use_cache=False)
  assert info["profiled_ops"] == 2
  assert graph.costs["CPU"][0] == pytest.approx(25.0)
  assert graph.costs["CPU"][1] == pytest.approx(10.0)


def test_the_executor_time_between_ops_is_shared_out(train_step_saved_model,
                                                     monkeypatch):
  loaded = graph_specs.load(train_step_saved_model, devices="local-cpus:2")
  names = list(loaded.graph.node_names)
  # 14 us of ops in a 20 us step, 2 us of it the step's fixed cost: 2 us per op.
  monkeypatch.setattr(
      "tf_gdp.runtime.measure.profile",
      lambda extracted, target, **kwargs: measure.OpProfile(
          {names[0]: 10.0, names[1]: 4.0}, step_time_us=20.0))
  base = topology_lib.get("local-cpus:2")
  topology = topology_lib.custom(
      base.name, base.devices, base.bandwidth_gbps, base.latency_us,
      base.hardware, runtime=runtime_costs.RuntimeCosts(
          step_overhead_us=(2.0, 3.0)))
  graph, info = profiled_costs.profiled_graph(
      loaded.graph, loaded.extracted, topology, use_cache=False)
  assert info["executor_gap_us"] == pytest.approx(2.0)
  assert graph.costs["CPU"][0] == pytest.approx(12.0)
  assert graph.costs["CPU"][1] == pytest.approx(6.0)
  # Ops that overlap (their sum exceeds the step) get nothing added.
  assert profiled_costs.executor_gap_us({"a": 10.0, "b": 10.0}, 12.0) == 0.0


def test_traced_times_beyond_a_one_thread_step_are_scaled_to_fit():
  # 20 us of traced ops in a step of 12 us (2 us of it fixed): tracing took
  # the other 10, and each op keeps its share of the 10 us that are left.
  assert profiled_costs.traced_scale({"a": 15.0, "b": 5.0}, 12.0,
                                     2.0) == pytest.approx(0.5)
  assert profiled_costs.traced_scale({"a": 4.0, "b": 5.0}, 12.0, 2.0) == 1.0
  assert profiled_costs.traced_scale({}, 12.0) == 1.0


def test_graphs_that_cannot_be_profiled_keep_their_costs(tmp_path):
  generated = graph_specs.LoadedGraph(generators.random_layered_graph(40, width=4))
  topology = topology_lib.get("local-cpus:2")
  graph, info = profiled_costs.profiled_graph(generated.graph, None,
                                              topology)
  assert graph is generated.graph and info["source"] == "as given"
  graph, info = profiled_costs.profiled_graph(
      generated.graph, None, topology_lib.get("p100x4"))
  assert graph is generated.graph and info["source"] == "roofline"
  assert "not attached" in info["why"]


def test_a_graph_that_does_not_run_keeps_its_costs_and_says_why(
    train_step_saved_model, monkeypatch):
  loaded = graph_specs.load(train_step_saved_model, devices="local-cpus:2")

  def fails(extracted, target, **kwargs):
    raise RuntimeError("cannot profile: a lookup table is not a variable\n"
                       "more detail")

  monkeypatch.setattr("tf_gdp.runtime.measure.profile", fails)
  graph, info = profiled_costs.profiled_graph(
      loaded.graph, loaded.extracted, topology_lib.get("local-cpus:2"))
  assert graph is loaded.graph and info["source"] == "roofline"
  assert info["why"] == "cannot profile: a lookup table is not a variable"


def test_place_reports_what_priced_the_ops_and_the_links(
    train_step_saved_model, tmp_path):
  outcomes = place_batch.place_many(
      train_step_saved_model, "local-cpus:2", str(tmp_path / "out"),
      method="round_robin", compare=(), pictures=False)
  report = json.loads((tmp_path / "out" / "train_step_model" /
                       "report.json").read_text())
  assert outcomes[0].result is not None
  assert report["costs"]["source"] == "profiled"
  assert report["links"] == "estimated"


def test_cpu_workers_are_calibrated_on_first_use(tmp_path, monkeypatch):
  calls = []

  def fake_calibrate(count, log):
    calls.append(count)
    guessed = topology_lib.get(f"cpu-workers:{count}")
    topology_lib.save(topology_lib.custom(
        guessed.name, guessed.devices, guessed.bandwidth_gbps * 2,
        guessed.latency_us, guessed.hardware, table_bytes=[1024, 4096],
        table_us=np.full((count, count, 2), 400.0),
        runtime=runtime_costs.RuntimeCosts(
            transfer_cpu_us_per_mb=(900.0, 900.0))),
        topology_lib.calibrated_path(count))
    return {}

  monkeypatch.setattr(calibrate, "calibrate", fake_calibrate)
  # A home of its own: the calibration it saves is no other test's.
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path / "home"))
  assert topology_lib.link_source(topology_lib.get("cpu-workers:2")) == "guessed"
  for _ in range(2):
    place_batch.place_many("layered:60", "cpu-workers:2", str(tmp_path / "o"),
                           method="single_device", compare=(), pictures=False)
  assert calls == [2]  # once: the second run reads the saved file
  report = json.loads((tmp_path / "o" / "layered_60" / "report.json").read_text())
  assert report["links"] == "measured"
  # A file from a version that did not measure every runtime cost is
  # measured again, once.
  path = topology_lib.calibrated_path(2)
  document = json.loads(open(path, encoding="utf-8").read())
  del document["runtime"]["transfer_cpu_us_per_mb"]
  with open(path, "w", encoding="utf-8") as f:
    json.dump(document, f)
  assert "older version" in calibrate.stale_reason(2)
  for _ in range(2):
    place_batch.place_many("layered:60", "cpu-workers:2", str(tmp_path / "o"),
                           method="single_device", compare=(), pictures=False)
  assert calls == [2, 2] and calibrate.stale_reason(2) is None
