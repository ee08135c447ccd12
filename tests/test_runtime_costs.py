"""The runtime's own costs in the simulator: step overhead, control edges as
transfers, transfer CPU time on busy and idle devices, the last-ready-first
executor; the compiled pass against the reference with them on."""

import dataclasses

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from tf_gdp.cost import runtime_costs
from tf_gdp.cost import simulator
from tf_gdp.cost import topology

from test_contention import _graph
from test_simulator import assert_agrees_with_reference
from test_simulator import random_graph
from test_simulator import random_priority
from test_simulator import random_topology


def _with(topo, **runtime):
  return dataclasses.replace(topo,
                             runtime=runtime_costs.RuntimeCosts(**runtime))


def _two_devices():
  """Two devices, 100 us latency, 1 byte per us: easy arithmetic."""
  devices = [topology.Device(f"/device:GPU:{i}", "GPU", 1 << 30)
             for i in range(2)]
  return topology.custom("two", devices, [[1e-3, 1e-3], [1e-3, 1e-3]],
                         [[0.0, 100.0], [100.0, 0.0]], {"GPU": "p100"})


def test_step_overhead_depends_on_how_many_devices_run_ops():
  graph = _graph([10.0, 10.0], [(0, 1, 0, 0)])
  topo = _with(_two_devices(), step_overhead_us=(5.0, 50.0))
  assert simulator.simulate(graph, [0, 0], topo).step_time_us == 25.0
  assert simulator.simulate(graph, [0, 1], topo).step_time_us == 170.0
  batch = simulator.simulate_batch(graph, [[1, 1], [0, 1]], topo)
  assert batch.step_time_us.tolist() == [25.0, 170.0]


def test_control_edges_become_one_transfer_per_producer_and_device():
  # n0 gates n1 and n2 on the other device by control edges: one dummy
  # transfer (latency 100 us) serves both, and it shares the pair's channel.
  graph = _graph([10.0, 1.0, 1.0], [(0, 1, 0, -1), (0, 2, 0, -1)])
  plain = simulator.simulate(graph, [0, 1, 1], _two_devices())
  assert plain.num_transfers == 0
  topo = _with(_two_devices(), control_transfers=True)
  result = simulator.simulate(graph, [0, 1, 1], topo, record_schedule=True)
  assert result.num_transfers == 1 and result.transfer_bytes == 0
  assert result.schedule.transfer_output.tolist() == [-1]
  assert result.schedule.transfer_node.tolist() == [0]
  assert result.step_time_us == pytest.approx(10.0 + 100.0 + 2.0)
  # Behind a 1000-byte tensor on the same pair, the dummy waits its turn.
  graph = _graph([10.0, 1.0, 1.0], [(0, 1, 1000, 0), (0, 2, 0, -1)])
  result = simulator.simulate(graph, [0, 1, 1], topo)
  assert result.step_time_us == pytest.approx(10.0 + 1100.0 + 100.0 + 1.0)


def test_a_busy_receiver_pays_for_each_arriving_transfer():
  # n2 (200 us) runs on device 1 while n0's tensor arrives at 110 us: the
  # next op there, n1, starts 30 us later than it would.
  graph = _graph([10.0, 1.0, 200.0], [(0, 1, 0, 0)])
  free = simulator.simulate(graph, [0, 1, 1], _two_devices())
  topo = _with(_two_devices(), transfer_cpu_us=(0.0, 30.0))
  paid = simulator.simulate(graph, [0, 1, 1], topo)
  assert paid.step_time_us == free.step_time_us + 30.0
  assert paid.device_busy_us[1] == free.device_busy_us[1] + 30.0
  # An idle receiver pays nothing beyond the link's latency.
  alone = _graph([10.0, 1.0], [(0, 1, 0, 0)])
  assert (simulator.simulate(alone, [0, 1], topo).step_time_us ==
          simulator.simulate(alone, [0, 1], _two_devices()).step_time_us)


def test_a_busy_receiver_also_pays_for_each_byte():
  # As above with a 2,000-byte tensor: 30 us plus 2,000 bytes at 5,000 us
  # per 10^6 bytes (10 us); a 0-byte transfer owes only the fixed part.
  graph = _graph([10.0, 1.0, 3000.0], [(0, 1, 2000, 0)])
  free = simulator.simulate(graph, [0, 1, 1], _two_devices())
  topo = _with(_two_devices(), transfer_cpu_us=(0.0, 30.0),
               transfer_cpu_us_per_mb=(0.0, 5000.0))
  paid = simulator.simulate(graph, [0, 1, 1], topo)
  assert paid.step_time_us == pytest.approx(free.step_time_us + 40.0)
  # An idle receiver owes nothing: its handling is in the link's time.
  idle = simulator.simulate(graph, [0, 1, 0], topo)
  assert idle.step_time_us == simulator.simulate(
      graph, [0, 1, 0], _two_devices()).step_time_us


def test_a_busy_sender_pays_for_each_byte_it_sends():
  # n0 sends 1,000 bytes to n1 on device 1; device 0 has started n2
  # (3,000 us) when the transfer leaves, so the next op there, n3, owes
  # 20 + 1,000 bytes at 10,000 us per 10^6 bytes = 30 us.
  graph = _graph([10.0, 1.0, 3000.0, 1.0], [(0, 1, 1000, 0), (0, 2, 1000, 0),
                                           (2, 3, 0, 0)])
  topo = _with(_two_devices(), transfer_cpu_us=(20.0, 0.0),
               transfer_cpu_us_per_mb=(10000.0, 0.0))
  free = simulator.simulate(graph, [0, 1, 0, 0], _two_devices())
  paid = simulator.simulate(graph, [0, 1, 0, 0], topo)
  assert paid.step_time_us == pytest.approx(free.step_time_us + 30.0)
  assert paid.device_busy_us[0] == pytest.approx(free.device_busy_us[0] + 30.0)


def test_pipelined_latency_lets_a_burst_share_a_link():
  # Three 0-byte tensors to the other device: each takes 100 us, but holds
  # the pair's channel for only 100 - 70 = 30 us.
  graph = _graph([10.0, 1.0, 1.0, 1.0],
                 [(0, 1, 0, 0), (0, 2, 0, 1), (0, 3, 0, 2)])
  serial = simulator.simulate(graph, [0, 1, 1, 1], _two_devices())
  assert serial.step_time_us == pytest.approx(10.0 + 300.0 + 1.0)
  topo = _with(_two_devices(), pipelined_latency_us=70.0)
  burst = simulator.simulate(graph, [0, 1, 1, 1], topo)
  assert burst.step_time_us == pytest.approx(10.0 + 60.0 + 100.0 + 1.0)


def test_a_burst_queues_on_an_idle_receivers_core():
  # The three tensors of the test above arrive at 110, 140 and 170 us; each
  # costs the idle receiver 50 us of handling. The first one's handling is
  # within its latency; the others queue behind it on the core (60-210 us),
  # so n3 can start only at 210.
  graph = _graph([10.0, 1.0, 1.0, 1.0],
                 [(0, 1, 0, 0), (0, 2, 0, 1), (0, 3, 0, 2)])
  burst = _with(_two_devices(), pipelined_latency_us=70.0)
  assert simulator.simulate(graph, [0, 1, 1, 1], burst).step_time_us == (
      pytest.approx(171.0))
  handled = _with(_two_devices(), pipelined_latency_us=70.0,
                  transfer_cpu_us=(0.0, 50.0))
  assert simulator.simulate(graph, [0, 1, 1, 1], handled).step_time_us == (
      pytest.approx(211.0))


def test_an_idle_sender_is_busy_while_its_transfer_leaves():
  # n0 (10 us, device 0) and n3 (5 us, device 1) each send a tensor to the
  # other device; sending takes 200 us of the sender's core. n2 on device 0
  # gets n3's tensor at 105 us but its core is handling n0's send until
  # 210 us; likewise n1 on device 1 (arrival 110, core busy until 205).
  graph = _graph([10.0, 1.0, 1.0, 5.0], [(0, 1, 0, 0), (3, 2, 0, 0)])
  free = simulator.simulate(graph, [0, 1, 0, 1], _two_devices())
  assert free.step_time_us == pytest.approx(111.0)
  topo = _with(_two_devices(), transfer_cpu_us=(200.0, 0.0))
  assert simulator.simulate(graph, [0, 1, 0, 1], topo).step_time_us == (
      pytest.approx(211.0))


def test_last_ready_first_runs_a_chain_depth_first():
  # n0 makes n1 and n2 ready; n1 -> n3 is a chain. Topological order runs
  # n1, n2, n3; the last-ready-first executor runs n2 (made ready last),
  # then n1 and at once its successor n3.
  graph = _graph([1.0, 1.0, 1.0, 1.0],
                 [(0, 1, 0, 0), (0, 2, 0, 1), (1, 3, 0, 0)])
  order = lambda topo: np.argsort(simulator.simulate(
      graph, [0] * 4, topo, record_schedule=True).schedule.op_start_us)
  assert order(_two_devices()).tolist() == [0, 1, 2, 3]
  lifo = _with(_two_devices(), executor_order="last_ready_first")
  assert order(lifo).tolist() == [0, 2, 1, 3]
  # A given priority overrides the executor's order.
  ordered = simulator.simulate(graph, [0] * 4, lifo, record_schedule=True,
                               priority=[0, 1, 2, 3])
  assert np.argsort(ordered.schedule.op_start_us).tolist() == [0, 1, 2, 3]


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40),
                  d=st.integers(1, 5), control=st.booleans(),
                  lifo=st.booleans(), with_priority=st.booleans())
def test_compiled_core_agrees_with_reference_with_runtime_costs(
    seed, n, d, control, lifo, with_priority):
  rng = np.random.default_rng(seed)
  graph = random_graph(rng, n)
  topo = _with(random_topology(rng, d),
               step_overhead_us=tuple(rng.uniform(0, 50, 2)),
               control_transfers=control,
               transfer_cpu_us=tuple(rng.uniform(0, 20, 2)),
               transfer_cpu_us_per_mb=tuple(rng.uniform(0, 20000, 2)),
               executor_order="last_ready_first" if lifo else "topological",
               pipelined_latency_us=float(rng.choice([0.0, rng.uniform(0, 20)])))
  priority = random_priority(rng, n) if with_priority else None
  placement = rng.integers(0, d, n)
  assert_agrees_with_reference(graph, placement, topo, priority)
  batch = simulator.simulate_batch(graph, [placement], topo,
                                   priority=priority)
  single = simulator.simulate(graph, placement, topo, priority=priority)
  assert batch.step_time_us[0] == single.step_time_us
  assert batch.num_transfers[0] == single.num_transfers
