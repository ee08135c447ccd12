"""Memory-tight graphs in the benchmarks: every row is a valid result.

A 6-op chain that no single device of a two-device box can hold: baselines
whose own placement overflows (round_robin's alternate ops do fit; putting
everything on one device does not) are repaired or replaced by a fallback,
and the table says which.
"""

import numpy as np
import pytest

from tf_gdp import graph_specs
from tf_gdp.bench import harness
from tf_gdp.bench import memory_tight_check
from tf_gdp.cost import topology
from tf_gdp.graph import op_graph

KIB = 1 << 10


def _chain(n=6):
  return op_graph.OpGraph.build(
      name="chain", node_names=[f"layer_{i}/op" for i in range(n)],
      op_types=["MatMul"] * n, costs={"GPU": [1.0] * n},
      output_bytes=[KIB] * n, memory_bytes=[4 * KIB] * n,
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=[KIB] * (n - 1))


@pytest.fixture(name="box")
def _box(tmp_path):
  devices = [topology.Device(f"/job:localhost/replica:0/task:0/device:GPU:{i}",
                             "GPU", 20 * KIB) for i in range(2)]
  path = str(tmp_path / "box.json")
  topology.save(topology.custom("box", devices, np.full((2, 2), 10.0),
                                np.full((2, 2), 1.0)), path)
  return path


def test_bench_rows_are_valid_results_and_say_what_was_repaired(box):
  rows = harness.bench_graph(graph_specs.LoadedGraph(_chain()), "chain", box,
                             ["single_device", "round_robin", "m_topo"])
  assert all(r.valid for r in rows), [r.reason for r in rows]
  single = rows[0]
  assert not single.own_valid and single.own_reason
  assert "repaired" in harness.format_table(rows, box)


def test_check_graph_counts_own_and_result_validity(box, monkeypatch):
  monkeypatch.setattr(harness, "CLASSIC_METHODS",
                      ("single_device", "round_robin"))
  rows = memory_tight_check.check_graph(
      graph_specs.LoadedGraph(_chain()), "chain", box, samples=2, seed=0,
      log=lambda line: None)
  methods = [r["method"] for r in rows]
  assert methods == ["single_device", "round_robin", "gdp", "auto"]
  assert all(r["valid"] for r in rows)
  assert not rows[0]["own_valid"]
  auto = rows[-1]
  assert auto["ratio_to_best"] == pytest.approx(1.0)
  table = memory_tight_check.format_table("chain", rows)
  assert "valid results: 4/4" in table
  assert f"own placements that fit: {sum(r['own_valid'] for r in rows)}/4" \
      in table
