"""Device topologies: presets, JSON files, and clear errors for bad ones."""

import json

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.cost import presets
from tf_gdp.cost import derived_topologies
from tf_gdp.cost import topology


@pytest.mark.parametrize("name,gpus,memory_gib", [
    ("p100x1", 1, 16), ("p100x2", 2, 16), ("p100x4", 4, 16), ("v100x8", 8, 32),
    ("h100x8", 8, 80)])
def test_gpu_presets_have_gpus_plus_a_host_cpu(name, gpus, memory_gib):
  topo = topology.get(name)
  assert topo.kinds == ["GPU"] * gpus + ["CPU"]
  assert topo.memory_bytes[0] == memory_gib * topology.GIB
  assert np.all(topo.bandwidth_gbps[~np.eye(gpus + 1, dtype=bool)] > 0)


def test_v100_nvlink_pairs_are_faster_than_pcie_pairs():
  topo = topology.get("v100x8")
  assert topo.bandwidth_gbps[0, 3] == 50.0  # two NVLinks in the DGX-1 mesh
  assert topo.bandwidth_gbps[0, 1] == 25.0
  assert topo.bandwidth_gbps[0, 5] == 12.0  # no direct link: PCIe via the host


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
  topo = topology.get("p100x2")
  assert topo.transfer_us(0, 1, 12e6) == pytest.approx(10.0 + 1000.0)
  assert topo.transfer_us(1, 1, 12e6) == 0.0


def test_cpu_workers_and_file_round_trip(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  topo = topology.get("cpu-workers:3")
  assert topo.num_devices == 3 and topo.hardware == {"CPU": "local_cpu_core"}
  path = str(tmp_path / "t.json")
  topology.save(topo, path)
  again = topology.get(path)
  assert topology.to_document(again) == topology.to_document(topo)
  # a calibrated file, once saved where `calibrate` puts it, is what the preset returns
  topology.save(topology.custom("measured", topo.devices, topo.bandwidth_gbps * 2,
                                topo.latency_us, topo.hardware),
                topology.calibrated_path(3))
  assert topology.get("cpu-workers:3").bandwidth_gbps[0, 1] == 2.0


def test_preset_prices_kinds_with_the_right_hardware():
  specs = presets.kind_hardware("v100x8")
  assert specs["GPU"].name == "v100" and specs["CPU"].kind == "CPU"


def _document(**changes):
  document = {"format": "tf-gdp-topology", "version": 1, "name": "t",
              "hardware": {"CPU": "host_cpu"},
              "devices": [{"name": "/device:CPU:0", "kind": "CPU", "memory_bytes": 1024},
                          {"name": "/device:CPU:1", "kind": "CPU", "memory_bytes": 1024}],
              "links": {"bandwidth_gbps": [[0, 1], [1, 0]], "latency_us": [[0, 5], [5, 0]]}}
  document.update(changes)
  return document


@pytest.mark.parametrize("changes,message", [
    ({"devices": []}, "has no devices"),
    ({"links": {"bandwidth_gbps": [[0, 0], [0, 0]], "latency_us": [[0, 5], [5, 0]]}},
     "bandwidth > 0"),
    ({"links": {"bandwidth_gbps": [[0, 1]], "latency_us": [[0, 5], [5, 0]]}}, "2x2"),
    ({"version": 9}, "unsupported topology version"),
    ({"devices": [{"name": "/device:CPU:0", "kind": "CPU", "memory_bytes": -1}]},
     "memory_bytes must be a positive integer"),
    ({"devices": [{"name": "/device:CPU:0", "kind": "CPU", "memory_bytes": 1024},
                  {"name": "/device:TPU:0", "kind": "TPU", "memory_bytes": 1024}]},
     "device kind 'TPU' is not one of GPU, CPU"),
])
def test_bad_topology_files(tmp_path, changes, message):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(_document(**changes)))
  with pytest.raises(errors.InputError, match=message):
    topology.get(str(path))


def test_link_table_round_trips_and_bad_tables_are_refused(tmp_path):
  table = {"table_bytes": [1024, 4096], "table_us": [[[0, 0], [9, 12]],
                                                     [[9, 12], [0, 0]]]}
  links = {"bandwidth_gbps": [[0, 1], [1, 0]], "latency_us": [[0, 5], [5, 0]]}
  path = tmp_path / "table.json"
  path.write_text(json.dumps(_document(links={**links, **table})))
  topo = topology.get(str(path))
  assert topo.transfer_us(0, 1, 4096) == 12.0
  assert topology.to_document(topo)["links"]["table_bytes"] == [1024, 4096]
  for bad, message in (
      ({"table_bytes": [1024]}, "both table_bytes and table_us"),
      ({"table_bytes": [4096, 1024]}, "strictly increasing"),
      ({"table_us": [[[0, 0], [12, 9]], [[9, 12], [0, 0]]]}, "non-decreasing"),
      ({"table_us": [[[0, 0], [1, 12]], [[9, 12], [0, 0]]]}, "link latency"),
      ({"table_us": [[0, 0], [9, 12]]}, "2x2x2")):
    changed = {**links, **table, **bad}
    if bad == {"table_bytes": [1024]}:
      del changed["table_us"]
    path.write_text(json.dumps(_document(links=changed)))
    with pytest.raises(errors.InputError, match=message):
      topology.get(str(path))


def test_unknown_preset():
  with pytest.raises(errors.InputError, match="unknown devices 'tpu9000'"):
    topology.get("tpu9000")


def test_reports_say_where_link_figures_come_from():
  assert topology.link_source(topology.get("p100x4")) == "datasheet"
  assert topology.link_source(topology.get("local-cpus:2")) == "estimated"
  guessed = topology.get("cpu-workers:5")  # no calibrated file for 5
  assert topology.link_source(guessed) == "guessed"
  measured = topology.custom(
      guessed.name, guessed.devices, guessed.bandwidth_gbps,
      guessed.latency_us, guessed.hardware, table_bytes=[1024],
      table_us=np.full((5, 5, 1), 400.0))
  assert topology.link_source(measured) == "measured"


def test_runtime_costs_round_trip_and_bad_ones_are_refused(tmp_path):
  runtime = {"step_overhead_us": [500.0, 1100.0], "control_transfers": True,
             "transfer_cpu_us": [40.0, 120.0],
             "transfer_cpu_us_per_mb": [600.0, 700.0],
             "executor_order": "last_ready_first",
             "pipelined_latency_us": 60.0}
  path = tmp_path / "runtime.json"
  # Files from before the per-byte part read it as zero.
  older = {k: v for k, v in runtime.items() if k != "transfer_cpu_us_per_mb"}
  path.write_text(json.dumps(_document(runtime=older)))
  assert topology.get(str(path)).runtime.transfer_cpu_us_per_mb == (0.0, 0.0)
  path.write_text(json.dumps(_document(runtime=runtime)))
  topo = topology.get(str(path))
  assert topo.runtime.step_overhead(1) == 500.0
  assert topo.runtime.step_overhead(2) == 1100.0
  assert topology.to_document(topo)["runtime"] == runtime
  subset = derived_topologies.subset(topo, [1], "one")
  assert subset.runtime == topo.runtime
  # Presets and files without the object keep the defaults, and say nothing.
  assert topology.get("p100x4").runtime.is_default
  assert "runtime" not in topology.to_document(topology.get("p100x4"))
  for bad, message in (
      ({"step_overhead_us": [1.0]}, "one device, several devices"),
      ({"transfer_cpu_us": [-1.0, 0.0]}, ">= 0 us"),
      ({"transfer_cpu_us_per_mb": [5.0]}, "sender, receiver"),
      ({"executor_order": "random"}, "executor_order must be one of"),
      ({"control_transfers": "yes"}, "true or false"),
      ({"pipelined_latency_us": "x"}, "malformed runtime"),
      ({"overhead": 3}, "unknown fields")):
    path.write_text(json.dumps(_document(runtime={**runtime, **bad})))
    with pytest.raises(errors.InputError, match=message):
      topology.get(str(path))
