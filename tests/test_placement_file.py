"""placement_file: the one placement-file format, written, read and applied."""

import json

import numpy as np
import pytest

from tf_gdp import errors
from tf_gdp import placement_file
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity
from tf_gdp.graph import op_graph


def _graph(names=("a", "b", "c"), name="g"):
  n = len(names)
  return op_graph.OpGraph.build(
      name=name, node_names=list(names), op_types=["Op"] * n,
      costs={"GPU": [1.0] * n}, output_bytes=[0] * n, memory_bytes=[0] * n,
      edge_src=list(range(n - 1)), edge_dst=list(range(1, n)),
      edge_bytes=[8] * (n - 1), edge_output=[0] * (n - 1))


@pytest.fixture(scope="module")
def topology():
  return topology_lib.get("p100x2")


def _write(tmp_path, graph, topology, placement, **kwargs):
  path = str(tmp_path / "p.json")
  placement_file.write(path, placement_file.document(
      graph, topology.device_names, placement, topology_name=topology.name,
      method="metis", step_time_us=12.5, **kwargs))
  return path


def test_round_trip(tmp_path, topology):
  graph = _graph()
  placement = np.array([0, 1, 0], np.int32)
  path = _write(tmp_path, graph, topology, placement, command="tf-gdp place",
                fields={"evaluation": 3})
  loaded = placement_file.read(path)
  assert loaded.method == "metis" and loaded.graph_name == "g"
  assert loaded.topology_name == topology.name
  assert loaded.graph_fingerprint == identity.graph_fingerprint(graph)
  assert loaded.step_time_us == 12.5
  assert loaded.devices == {"a": topology.device_names[0],
                            "b": topology.device_names[1],
                            "c": topology.device_names[0]}
  assert loaded.document["command"] == "tf-gdp place"
  assert loaded.document["evaluation"] == 3
  np.testing.assert_array_equal(placement_file.apply(loaded, graph, topology),
                                placement)
  np.testing.assert_array_equal(placement_file.load(graph, topology, path),
                                placement)
  assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temp file


def test_reads_files_of_version_1(tmp_path, topology):
  """A file exactly as earlier releases wrote it (no command) still reads."""
  device = topology.device_names[1]
  path = tmp_path / "old.json"
  path.write_text(json.dumps({
      "format": "tf-gdp-placement", "version": 1, "method": "round_robin",
      "graph": "g", "graph_fingerprint": "0" * 64, "topology": topology.name,
      "devices": topology.device_names, "step_time_us": 3.0,
      "step_time_source": "simulate",
      "placement": {"a": device, "b": device, "c": device}}, indent=1))
  np.testing.assert_array_equal(
      placement_file.load(_graph(), topology, str(path)), [1, 1, 1])


@pytest.mark.parametrize("text, message", [
    ("[1, 2", "not a placement JSON file"),
    ("[1, 2]", "not a tf-gdp placement file: the JSON is a list"),
    ('{"format": "tf-gdp-opgraph", "placement": {}}',
     "not a tf-gdp placement file: its format is 'tf-gdp-opgraph'"),
    ('{"format": "tf-gdp-placement", "version": 2, "placement": {}}',
     "version 2 is not one this tf-gdp reads"),
    ('{"format": "tf-gdp-placement", "version": 1}',
     "'placement' must map op names to device names"),
    ('{"format": "tf-gdp-placement", "version": 1, "placement": {"a": 0}}',
     "'placement' must map op names to device names"),
    ('{"format": "tf-gdp-placement", "version": 1, "placement": {},'
     ' "step_time_us": "fast"}', "'step_time_us' must be a number"),
    ('{"format": "tf-gdp-placement", "version": 1, "placement": {},'
     ' "method": 7}', "'method' must be a string"),
])
def test_malformed_or_foreign_file_is_one_clear_input_error(tmp_path, text,
                                                            message):
  (tmp_path / "bad.json").write_text(text)
  with pytest.raises(errors.InputError, match=message) as raised:
    placement_file.read(str(tmp_path / "bad.json"))
  assert "\n" not in str(raised.value)  # one line


def test_missing_file_is_an_input_error(tmp_path):
  with pytest.raises(errors.InputError, match="placement file"):
    placement_file.read(str(tmp_path / "missing.json"))


def test_applying_to_other_op_names_or_devices_fails_clearly(tmp_path,
                                                             topology):
  path = _write(tmp_path, _graph(), topology, [0, 1, 0])
  other = _graph(names=("a", "x", "y", "z"), name="other")
  with pytest.raises(errors.PlacementError,
                     match=r"does not match graph 'other': 3 of its ops have "
                     r"no device \(e\.g\. 'x', 'y', 'z'\), and the file places "
                     r"2 ops the graph lacks"):
    placement_file.load(other, topology, path)
  with pytest.raises(errors.PlacementError, match="does not have"):
    placement_file.load(_graph(), topology_lib.get("cpu-workers:2"), path)
