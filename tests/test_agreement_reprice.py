"""Re-pricing a saved agreement run on another calibration."""

import dataclasses

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp.bench import agreement_reprice
from tf_gdp.bench import bench_graphs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology
from tf_gdp.graph import json_io

# Two chains of 20 ops, priced for CPU workers only.
_GRAPH = json_io.from_document({
    "format": "tf-gdp-opgraph", "version": 1, "name": "chains",
    "nodes": [{"name": f"n{i}", "op": "MatMul", "cost": {"CPU": 10.0},
               "output_bytes": 4096, "memory_bytes": 0} for i in range(40)],
    "edges": [{"src": i, "dst": i + 1, "bytes": 4096}
              for i in range(40) if i % 20 != 19]})


class _Built:

  def __init__(self, label):
    self.label = label

  def load(self, devices):
    del devices
    return graph_specs.LoadedGraph(_GRAPH)


def _run(speed: float) -> dict:
  split = (np.arange(40) % 2).astype(int)
  rows = [{"placement": label, "devices": p.tolist(), "measured_us": us,
           "measured_median_us": us, "measured_min_us": 0.9 * us,
           "roofline_us": 1.0, "profiled_us": 2.0}
          for label, p, us in (("all_on_0", np.zeros(40, int), 1000.0),
                               ("split", split, 3000.0),
                               ("method:m_etf", split, 3100.0))]
  profiled = np.full(40, 50.0) * speed  # stored times the worker's speed
  return {"benchmark": "agreement_check", "aggregate": "median", "rounds": 1,
          "topology": {"speed": [speed, speed]},
          "graphs": [{"graph": "g", "nodes": 40, "rows": rows,
                      "profiled_costs_us": profiled.tolist(),
                      "summary": {}}]}


def test_reprice_redoes_predictions_and_keeps_measurements(monkeypatch):
  monkeypatch.setitem(bench_graphs.BUILDERS, "g", None)
  monkeypatch.setattr(bench_graphs, "BuiltGraph", _Built)
  topo = topology.get("cpu-workers:2")
  topo = dataclasses.replace(topo, devices=[
      dataclasses.replace(d, speed=2.0) for d in topo.devices])
  out = agreement_reprice.reprice(_run(speed=1.25), topo, log=lambda s: None)
  rows = out["graphs"][0]["rows"]
  expected = simulator.simulate(
      _GRAPH.with_costs({"CPU": np.full(40, 50.0 * 2.0)}), np.zeros(40, int),
      topo).step_time_us
  # 50 us measured per op on a worker of speed 1.25, charged 50 us again on
  # a worker now calibrated at speed 2.
  assert rows[0]["profiled_us"] == pytest.approx(expected)
  assert rows[0]["profiled_before_us"] == 2.0
  assert rows[1]["measured_us"] == 3000.0
  assert out["graphs"][0]["summary"]["profiled"]["n"] == 3
  assert out["overall"]["profiled:methods"]["n"] == 1
  assert out["repriced_on"]["speed"] == [2.0, 2.0]


def test_reprice_refuses_a_graph_it_cannot_rebuild(monkeypatch):
  result = _run(speed=1.0)
  result["graphs"][0]["graph"] = "no_such_graph"
  with pytest.raises(errors.InputError, match="no_such_graph"):
    agreement_reprice.reprice(result, topology.get("cpu-workers:2"),
                              log=lambda s: None)
