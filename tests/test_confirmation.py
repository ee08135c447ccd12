"""A placement for devices that can be timed is confirmed by measuring it."""

import json

import numpy as np
import pytest

from tf_gdp import confirm_placement
from tf_gdp import place_batch
from tf_gdp import placing
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import generators
from tf_gdp.runtime import confirmation
from tf_gdp.runtime import measure


def _candidates(names):
  return [confirmation.Candidate(n, np.full(3, i, np.int32), 100.0 + i)
          for i, n in enumerate(names)]


def _scripted(monkeypatch, times):
  """measure.measure returning `times[name][round]` (None: a failed run)."""
  by_device = {}
  calls = []

  def fake(extracted, placement, target, **kwargs):
    del extracted, target, kwargs
    name = by_device[int(placement[0])]
    calls.append(name)
    value = times[name][sum(c == name for c in calls) - 1]
    if value is None:
      return measure.invalid("out of memory")
    return measure.Measurement(step_time_us=value, times_us=(value,),
                               valid=True, target="fake")

  monkeypatch.setattr(measure, "measure", fake)
  return by_device, calls


def test_the_best_measured_median_wins_and_rounds_rotate(monkeypatch):
  names = ["gdp", "metis", "single_device"]
  by_device, calls = _scripted(monkeypatch, {
      "gdp": [50.0, 70.0, 60.0], "metis": [90.0, 80.0, 85.0],
      "single_device": [100.0, 100.0, 100.0]})
  by_device.update({0: "gdp", 1: "metis", 2: "single_device"})
  found = confirmation.confirm(None, _candidates(names), "local",
                               topology=None, rounds=3)
  assert found.chosen == "gdp"
  assert [r["measured_us"] for r in found.rows] == [60.0, 85.0, 100.0]
  assert calls[:3] == names and calls[3:6] == names[1:] + names[:1]


def test_one_device_wins_ties_and_failures_never_win(monkeypatch):
  names = ["gdp", "metis", "single_device"]
  by_device, _ = _scripted(monkeypatch, {
      "gdp": [97.0, 97.0, 97.0], "metis": [None, 10.0, 10.0],
      "single_device": [100.0, 100.0, 100.0]})
  by_device.update({0: "gdp", 1: "metis", 2: "single_device"})
  found = confirmation.confirm(None, _candidates(names), "local",
                               topology=None, rounds=3)
  assert found.chosen == "single_device"  # 3% is inside the tie margin
  assert not found.rows[1]["valid"] and found.rows[1]["reason"]


def test_a_split_must_beat_one_device_in_every_round(monkeypatch):
  # gdp's median is 20% below one device's, but one round is slower: a
  # spread like that is the machine's noise, not the placement's speed.
  names = ["gdp", "metis", "single_device"]
  by_device, _ = _scripted(monkeypatch, {
      "gdp": [80.0, 80.0, 105.0], "metis": [90.0, 85.0, 92.0],
      "single_device": [100.0, 100.0, 100.0]})
  by_device.update({0: "gdp", 1: "metis", 2: "single_device"})
  found = confirmation.confirm(None, _candidates(names), "local",
                               topology=None, rounds=3)
  assert found.chosen == "metis"  # faster in every round, by 8% in the median


def test_one_placement_under_two_names_is_measured_once(monkeypatch):
  by_device, calls = _scripted(monkeypatch, {
      "single_device": [100.0, 101.0], "gdp": [70.0, 70.0]})
  by_device.update({0: "single_device", 1: "gdp"})
  candidates = [confirmation.Candidate("metis", np.zeros(3, np.int32), 90.0),
                confirmation.Candidate("gdp", np.ones(3, np.int32), 80.0),
                confirmation.Candidate("single_device", np.zeros(3, np.int32),
                                       100.0)]
  found = confirmation.confirm(None, candidates, "local", topology=None,
                               rounds=2)
  assert sorted(calls) == ["gdp", "gdp", "single_device", "single_device"]
  rows = {row["name"]: row for row in found.rows}
  assert rows["metis"]["same_as"] == "single_device"
  assert rows["metis"]["round_us"] == rows["single_device"]["round_us"]
  assert found.chosen == "gdp"


def test_confirmation_needs_the_single_device_candidate():
  with pytest.raises(ValueError, match="single_device"):
    confirmation.confirm(None, _candidates(["gdp"]), "local", topology=None)


def test_devices_that_cannot_be_timed_say_so():
  graph = generators.random_layered_graph(30, width=3)
  for devices, note in (("local-cpus:2", "share its thread pool"),
                        ("p100x4", "not attached here")):
    topology = topology_lib.get(devices)
    result = placing.place(graph, topology, "round_robin", compare=())
    confirmed = confirm_placement.confirm(result, graph, topology, object())
    assert confirmed.details["confirmation"]["measured"] is False
    assert note in confirmed.details["confirmation"]["note"]
    np.testing.assert_array_equal(confirmed.placement, result.placement)
  assert confirmation.target_for(topology_lib.get("cpu-workers:2")) == (
      "cpu-workers:2")


def test_place_on_cpu_workers_keeps_the_best_measured(train_step_saved_model,
                                                      tmp_path):
  outcomes = place_batch.place_many(
      train_step_saved_model, "cpu-workers:2", str(tmp_path / "out"),
      method="round_robin", compare=("single_device", "metis"),
      pictures=False, calibrate=False)
  result = outcomes[0].result
  confirmed = result.details["confirmation"]
  assert confirmed["measured"] and confirmed["requested_method"] == "round_robin"
  rows = {row["name"]: row for row in confirmed["rows"]}
  assert set(rows) == {"round_robin", "metis", "single_device"}
  chosen = rows[confirmed["chosen"]]
  assert chosen["valid"] and len(chosen["round_us"]) == confirmation.DEFAULT_ROUNDS
  assert chosen["measured_us"] <= rows["single_device"]["measured_us"]
  assert result.method == confirmed["chosen"]
  report = json.loads((tmp_path / "out" / "train_step_model" /
                       "report.json").read_text())
  assert report["details"]["confirmation"]["chosen"] == confirmed["chosen"]
