"""Calibration's fit and topology, on synthetic data (no cluster needed)."""

import contextlib

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp.cost import topology
from tf_gdp.runtime import calibrate
from tf_gdp.runtime import calibrate_runtime
from tf_gdp.runtime import calibrate_speed
from tf_gdp.runtime import workers

_SIZES = np.array(calibrate.DEFAULT_SIZES, np.float64)


def _times(latency_us, bandwidth_gbps, sizes=_SIZES):
  return latency_us + sizes / (bandwidth_gbps * 1e3)


def test_fit_recovers_exact_latency_and_bandwidth():
  fit = calibrate.fit_link(_SIZES, _times(150.0, 1.5))
  assert fit.latency_us == pytest.approx(150.0, rel=1e-6)
  assert fit.bandwidth_gbps == pytest.approx(1.5, rel=1e-6)
  assert fit.points == len(_SIZES)
  assert fit.predict_us(1 << 20) == pytest.approx(_times(150.0, 1.5, 1 << 20))


def test_fit_recovers_figures_from_noisy_times():
  rng = np.random.default_rng(0)
  errors_ = []
  for _ in range(20):
    noisy = _times(80.0, 2.5) * rng.uniform(0.9, 1.1, _SIZES.size)
    fit = calibrate.fit_link(_SIZES, noisy)
    errors_.append((fit.latency_us / 80.0 - 1, fit.bandwidth_gbps / 2.5 - 1))
  median = np.median(np.abs(errors_), axis=0)
  assert median[0] < 0.1 and median[1] < 0.1


def test_fit_weighs_relative_error_so_small_transfers_count():
  # An unweighted fit would let the 64 MB point swamp the latency.
  fit = calibrate.fit_link(_SIZES, _times(300.0, 1.0))
  small = fit.predict_us(1024)
  assert small == pytest.approx(_times(300.0, 1.0, 1024), rel=1e-3)


def test_fit_drops_non_positive_times_and_rejects_too_few_points():
  times = _times(100.0, 1.0)
  times[0] = -5.0  # noise swamped the smallest transfer
  fit = calibrate.fit_link(_SIZES, times)
  assert fit.points == len(_SIZES) - 1
  assert fit.latency_us == pytest.approx(100.0, rel=1e-6)
  with pytest.raises(errors.InputError):
    calibrate.fit_link([1024, 2048], [10.0, -1.0])
  with pytest.raises(errors.InputError):
    calibrate.fit_link([1024, 2048, 4096], [10.0, 20.0])


def test_fit_keeps_latency_non_negative():
  fit = calibrate.fit_link(_SIZES, _SIZES / 1e3)  # 1 GB/s, no latency
  assert fit.latency_us >= 0.0
  assert fit.bandwidth_gbps == pytest.approx(1.0, rel=1e-3)


def test_calibrated_topology_is_what_cpu_workers_preset_reads(tmp_path,
                                                             monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  links = {(0, 1): calibrate.LinkFit(120.0, 1.6, 9),
           (1, 0): calibrate.LinkFit(140.0, 1.2, 9)}
  topo = calibrate.calibrated_topology(2, links, speed=1.1)
  topology.save(topo, topology.calibrated_path(2))
  loaded = topology.get("cpu-workers:2")
  assert loaded.latency_us[0, 1] == pytest.approx(120.0)
  assert loaded.latency_us[1, 0] == pytest.approx(140.0)
  assert loaded.bandwidth_gbps[1, 0] == pytest.approx(1.2)
  assert list(loaded.speeds) == pytest.approx([1.1, 1.1])
  assert loaded.hardware == {"CPU": "local_cpu_core"}
  assert loaded.device_names[1] == "/job:worker/replica:0/task:1/device:CPU:0"
  assert loaded.transfer_us(0, 1, 1.6e6) == pytest.approx(120.0 + 1000.0)
  assert loaded.runtime.is_default  # no runtime measured: the plain model


def test_measured_runtime_costs_are_saved_with_the_calibrated_topology(
    tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  runtime = calibrate_runtime.measured_runtime_costs(
      {"one_worker_us": 600.0, "all_workers_us": 950.0},
      {"sender_us": 90.0, "receiver_us": 80.0},
      {"per_transfer_us": 75.0}, small_transfer_us=340.0)
  assert runtime.step_overhead_us == (600.0, 950.0)
  assert runtime.transfer_cpu_us == (90.0, 80.0)
  assert runtime.control_transfers
  assert runtime.executor_order == "last_ready_first"
  assert runtime.pipelined_latency_us == pytest.approx(265.0)
  # A burst no cheaper than one transfer pipelines nothing.
  assert calibrate_runtime.measured_runtime_costs(
      {"one_worker_us": 1.0, "all_workers_us": 2.0},
      {"sender_us": 0.0, "receiver_us": 0.0}, {"per_transfer_us": 400.0},
      small_transfer_us=340.0).pipelined_latency_us == 0.0
  links = {(0, 1): calibrate.LinkFit(120.0, 1.6, 9),
           (1, 0): calibrate.LinkFit(140.0, 1.2, 9)}
  topology.save(calibrate.calibrated_topology(2, links, runtime=runtime),
                topology.calibrated_path(2))
  assert topology.get("cpu-workers:2").runtime == runtime


def test_calibrated_topology_fills_unmeasured_pairs(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  topo = calibrate.calibrated_topology(
      3, {(0, 1): calibrate.LinkFit(100.0, 1.0, 9),
          (1, 0): calibrate.LinkFit(300.0, 3.0, 9)})
  assert topo.latency_us[2, 0] == pytest.approx(200.0)
  # Mean time per byte of 1 and 3 GB/s is that of 1.5 GB/s.
  assert topo.bandwidth_gbps[1, 2] == pytest.approx(1.5)
  assert topo.latency_us[2, 2] == 0.0
  with pytest.raises(errors.InputError):
    calibrate.calibrated_topology(2, {})


def test_calibrated_topology_carries_the_measured_link_table():
  def points(times):
    return [calibrate.TransferPoint(n, t + 1000.0, 1000.0, t)
            for n, t in zip((1024, 1 << 20, 4 << 20), times)]

  fits = {(0, 1): calibrate.LinkFit(250.0, 1.6, 3),
          (1, 0): calibrate.LinkFit(200.0, 1.6, 3)}
  tables = {(0, 1): points([220.0, 700.0, 3100.0]),
            (1, 0): points([230.0, 220.0, 3000.0])}  # a noisy dip at 1 MB
  topo = calibrate.calibrated_topology(2, fits, tables=tables)
  assert topo.transfer_us(0, 1, 1 << 20) == pytest.approx(700.0)
  assert topo.transfer_us(1, 0, 1 << 20) == pytest.approx(230.0)  # held
  assert topo.latency_us[0, 1] == pytest.approx(220.0)  # not above the table
  assert topo.latency_us[1, 0] == pytest.approx(200.0)
  # Beyond the last point each byte costs 1 / bandwidth.
  assert topo.transfer_us(0, 1, (4 << 20) + 1.6e6) == pytest.approx(4100.0)
  three = calibrate.calibrated_topology(3, fits, tables=tables)
  assert three.transfer_us(2, 0, 1 << 20) == pytest.approx(465.0)


def test_median_points_takes_the_median_round_per_size():
  def point(nbytes, us):
    return calibrate.TransferPoint(nbytes, us + 1000.0, 1000.0, us)

  rounds = [[point(1024, 100.0), point(2048, 900.0)],
            [point(1024, 300.0), point(2048, 200.0)],
            [point(1024, 200.0), point(2048, 250.0)]]
  merged = calibrate.median_points(rounds)
  assert [p.nbytes for p in merged] == [1024, 2048]
  assert [p.transfer_us for p in merged] == [200.0, 250.0]


def test_both_directions_are_pooled_for_every_pair():
  fits = {(0, 1): calibrate.LinkFit(300.0, 1.0, 9),
          (1, 0): calibrate.LinkFit(100.0, 3.0, 9)}
  point = lambda nbytes, us: calibrate.TransferPoint(nbytes, us + 50.0, 50.0,
                                                     us)
  tables = {(0, 1): [point(1024, 600.0), point(4096, 800.0)],
            (1, 0): [point(1024, 200.0), point(4096, 400.0)]}
  pooled_fits, pooled_tables = calibrate.pooled_links(3, fits, tables)
  assert set(pooled_fits) == set(pooled_tables) == {
      (i, j) for i in range(3) for j in range(3) if i != j}
  fit = pooled_fits[(2, 0)]
  assert fit.latency_us == 200.0 and fit.points == 18
  assert fit.bandwidth_gbps == pytest.approx(1.5)  # 1 / mean(1/1, 1/3)
  assert [p.transfer_us for p in pooled_tables[(0, 1)]] == [400.0, 600.0]
  assert pooled_tables[(1, 0)] == pooled_tables[(0, 1)]
  topo = calibrate.calibrated_topology(3, pooled_fits, tables=pooled_tables)
  assert np.array_equal(topo.table_us[0, 1], topo.table_us[1, 0])
  assert topo.transfer_us(0, 1, 4096) == topo.transfer_us(2, 1, 4096)


def test_the_runtime_costs_are_the_median_over_fresh_clusters(tmp_path,
                                                              monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  rounds = iter(range(3))
  per_mb = [900.0, 1500.0, 1000.0]  # one instance far off the others

  class Cluster:

    def __enter__(self):
      self.round = next(rounds)
      return self

    def __exit__(self, *unused):
      pass

  monkeypatch.setattr(workers, "CpuWorkerCluster", lambda count: Cluster())
  monkeypatch.setattr(
      calibrate, "measure_transfers", lambda cluster, sizes, src, dst: [
          calibrate.TransferPoint(n, 0.0, 0.0, 300.0 + n / 1e3)
          for n in sizes])
  monkeypatch.setitem(calibrate._RUNTIME_MEASUREMENTS, "step_overhead",
                      lambda cluster: {"one_worker_us": 600.0 + cluster.round,
                                       "all_workers_us": 900.0})
  monkeypatch.setitem(
      calibrate._RUNTIME_MEASUREMENTS, "transfer_cpu", lambda cluster: {
          "sender_us": 60.0, "receiver_us": 70.0,
          "sender_us_per_mb": per_mb[cluster.round],
          "receiver_us_per_mb": per_mb[cluster.round],
          "sender_small_steps_us": {"transfers": 1.0, "local": 1.0}})
  monkeypatch.setitem(calibrate._RUNTIME_MEASUREMENTS, "transfer_burst",
                      lambda cluster: {"per_transfer_us": 80.0})
  report = calibrate.calibrate(2, rounds=3, log=lambda line: None)
  runtime = topology.get("cpu-workers:2").runtime
  assert runtime.transfer_cpu_us_per_mb == (1000.0, 1000.0)
  assert runtime.step_overhead_us == (601.0, 900.0)
  assert len(report["runtime_rounds"]["transfer_cpu"]) == 3


def test_each_worker_gets_its_own_measured_speed(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  compute = {"mlp": {"speed_by_worker": [1.0, 0.9]},
             "conv": {"speed_by_worker": [1.21, 1.0]}}
  speeds = calibrate_speed.worker_speeds(compute)
  assert speeds == pytest.approx([1.1, 0.9 ** 0.5])
  links = {(0, 1): calibrate.LinkFit(120.0, 1.6, 9)}
  topology.save(calibrate.calibrated_topology(2, links, speed=speeds),
                topology.calibrated_path(2))
  assert list(topology.get("cpu-workers:2").speeds) == pytest.approx(speeds)


def test_calibration_says_how_far_its_rounds_were_apart(tmp_path, monkeypatch):
  monkeypatch.setenv("TF_GDP_HOME", str(tmp_path))
  lines = []
  monkeypatch.setattr(workers, "CpuWorkerCluster",
                      lambda count: contextlib.nullcontext())
  monkeypatch.setattr(
      calibrate, "measure_transfers", lambda cluster, sizes, src, dst: [
          calibrate.TransferPoint(n, 0.0, 0.0, 300.0 + n / 1e3)
          for n in sizes])
  per_mb = iter([700.0, 1200.0])
  monkeypatch.setitem(calibrate._RUNTIME_MEASUREMENTS, "step_overhead",
                      lambda cluster: {"one_worker_us": 600.0,
                                       "all_workers_us": 900.0})
  monkeypatch.setitem(
      calibrate._RUNTIME_MEASUREMENTS, "transfer_cpu", lambda cluster: dict(
          sender_us=60.0, receiver_us=70.0, sender_us_per_mb=next(per_mb),
          receiver_us_per_mb=800.0))
  monkeypatch.setitem(calibrate._RUNTIME_MEASUREMENTS, "transfer_burst",
                      lambda cluster: {"per_transfer_us": 80.0})
  calibrate.calibrate(2, rounds=2, log=lines.append)
  assert ("per MB sent / received, by round (the median is saved): "
          "700 / 800 us, 1200 / 800 us") in lines
