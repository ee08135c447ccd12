"""Reliability cases about inputs: graph files, op-graph JSON and topologies.

Files that are not graphs (empty, missing, random or truncated bytes, broken
or hostile protobufs), op-graph JSON that breaks the format or its limits,
topology files that describe no usable machine, and unknown device names.
Each gives one typed error line (`errors.GraphLoadError`, `GraphFormatError`,
`InputError`) through the API and the CLI, but for an op type the cost
model never saw, which loads when its costs are given.
"""

import json
import os
import random
from typing import List

import numpy as np

from tf_gdp import errors
from tf_gdp.bench import reliability_case

_TINY = reliability_case.tiny_document()


def small_graph_def_bytes() -> bytes:
  """A real serialized GraphDef: relu(x @ x) on a 4x4 constant."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(np.ones((4, 4), np.float32), name="x")
    tf.nn.relu(tf.matmul(x, x, name="mm"), name="relu")
  return graph.as_graph_def().SerializeToString()


def _graph_def(nodes, producer=None) -> bytes:
  """A GraphDef of (name, op, inputs) nodes, each with attr T=float."""
  from grappler_bridge import graph_io  # pylint: disable=g-import-not-at-top
  return graph_io.graph_def_bytes(nodes, producer=producer)


def _deep_pbtxt(levels: int) -> str:
  opening = 'func { name: "f" attr { key: "k" value { '
  return ('node { name: "a" op: "NoOp" attr { key: "k" value { ' +
          opening * levels + "} } }" * levels + "} } }")


def _load(path: str) -> str:
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  graph = graph_specs.load(path).graph
  return f"loaded {graph.num_nodes} nodes"


def _graph_file_case(name, given, expect, filename, data, *,
                     error=errors.GraphLoadError, env=None, slow=False,
                     export=True) -> reliability_case.Case:
  """A graph file given to `graph_specs.load`, `inspect` and `export-graph`."""

  def api(tmp):
    path = os.path.join(tmp, filename)
    if data is not None:  # None: the file is missing
      reliability_case.write(tmp, filename, data() if callable(data) else data)
    return _load(path)

  def cli(tmp):
    path = os.path.join(tmp, filename)
    runs = [["inspect", f"--graph={path}"]]
    if export:
      out = os.path.join(tmp, reliability_case.OUT, "exported.json")
      runs.append(["export-graph", f"--graph={path}", f"--out={out}"])
    return runs

  return reliability_case.Case(
      name=name, given=given, expect=expect, api=api, error=error, cli=cli,
      env=env, test=f"tests/test_reliability_inputs.py::test_api[{name}]",
      slow=slow)


def _json_case(name, given, expect, document,
               **kwargs) -> reliability_case.Case:
  """`document`: a dict, raw text or bytes, or a function returning one."""

  def text():
    value = document() if callable(document) else document
    return value if isinstance(value, (str, bytes)) else json.dumps(value)

  kwargs.setdefault("error", errors.GraphFormatError)
  return _graph_file_case(name, given, expect, "graph.json", text, **kwargs)


def _topology_case(name, given, expect, document) -> reliability_case.Case:
  """A topology file given to `topology.get` and to `place --devices`."""

  def api(tmp):
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    text = document if isinstance(document, str) else json.dumps(document)
    topology.get(reliability_case.write(tmp, "topology.json", text))

  def cli(tmp):
    graph = reliability_case.write(
        tmp, "graph.json", json.dumps(reliability_case.tiny_document()))
    return reliability_case.place_cli(tmp, graph,
                                      os.path.join(tmp, "topology.json"))

  return reliability_case.Case(
      name=name, given=given, expect=expect, api=api, cli=cli,
      test=f"tests/test_reliability_inputs.py::test_api[{name}]", slow=True)


def math_nan() -> float:
  return float("nan")


def _get_topology(spec: str) -> None:
  from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
  topology.get(spec)


def cases() -> List[reliability_case.Case]:
  """The input cases, in the order of the docs table."""
  rng = random.Random(0)
  random_bytes = bytes(rng.getrandbits(8) for _ in range(4096))
  return [
      # -- files that are not graphs --
      _graph_file_case("empty_json", "empty .json file", r"file is empty",
                       "graph.json", b""),
      _graph_file_case("empty_pb", "empty .pb file", r"file is empty",
                       "graph.pb", b""),
      _graph_file_case("missing_file", "a path that does not exist",
                       r"no such file", "graph.json", None, export=False),
      _graph_file_case("unknown_suffix", "a .onnx file",
                       r"unknown graph file type", "graph.onnx", b"\x08\x01"),
      _graph_file_case("random_pb", "4 KB of random bytes named .pb",
                       r"not a binary GraphDef or MetaGraphDef", "graph.pb",
                       random_bytes, slow=True),
      _graph_file_case("truncated_pb", "a real GraphDef cut in half",
                       r"not a binary GraphDef or MetaGraphDef \(protobuf "
                       r"parse failed", "graph.pb",
                       lambda: small_graph_def_bytes()[:200], slow=True),
      _graph_file_case("pbtxt_syntax", ".pbtxt with a syntax error",
                       r"not a text GraphDef or MetaGraphDef: 1:\d+ : ",
                       "graph.pbtxt", 'node { name: "a" op: "Const" ',
                       slow=True),
      _graph_file_case("pbtxt_deep", ".pbtxt nested 3000 levels deep",
                       r"text graph nested too deeply", "graph.pbtxt",
                       _deep_pbtxt(3000), slow=True),
      _graph_file_case("pb_zero_nodes", "GraphDef with zero nodes",
                       r"the graph has no nodes", "graph.pb",
                       lambda: _graph_def([], producer=1), slow=True),
      _graph_file_case("pb_unknown_op", "GraphDef with op type FooBarOp",
                       r"node 'a' has op type 'FooBarOp', which this "
                       r"TensorFlow .* does not know", "graph.pb",
                       lambda: _graph_def([("a", "FooBarOp", [])]), slow=True),
      _graph_file_case("pb_cycle", "GraphDef with a cycle a -> b -> a",
                       r"invalid graph: 2 nodes in a cycle", "graph.pb",
                       lambda: _graph_def([("a", "Identity", ["b"]),
                                           ("b", "Identity", ["a"])]),
                       slow=True),
      _graph_file_case("pb_dangling_input", "GraphDef reading a missing node",
                       r"invalid graph: Node 'a': Unknown input node 'zz'",
                       "graph.pb",
                       lambda: _graph_def([("a", "Identity", ["zz"])]),
                       slow=True),
      _graph_file_case("pb_10m_empty_nodes",
                       "GraphDef declaring 10 million empty nodes (20 MB)",
                       r"holds no graph \(nodes without a name or an op\)",
                       "graph.pb", lambda: b"\x0a\x00" * 10_000_000,
                       slow=True, export=False),
      _graph_file_case("over_size_limit",
                       "2 KB file with TF_GDP_MAX_INPUT_BYTES=1K",
                       r"file is \d+ bytes, over the 1024-byte input limit",
                       "graph.json",
                       json.dumps(reliability_case.tiny_document(
                           metadata={"pad": "x" * 2048})),
                       env={"TF_GDP_MAX_INPUT_BYTES": "1K"}),
      # -- op-graph JSON that breaks the format --
      _json_case("json_truncated", "op-graph JSON cut short",
                 r"invalid JSON at line 1 column \d+",
                 json.dumps(_TINY)[:-30], error=errors.GraphLoadError),
      _json_case("json_not_utf8", "op-graph .json in Latin-1 bytes",
                 r"not UTF-8 text", b'{"name": "caf\xe9"}',
                 error=errors.GraphLoadError),
      _json_case("json_cycle", "op-graph JSON with a cycle c -> a",
                 r"the edges contain a cycle \(through '[abc]'\)",
                 reliability_case.tiny_document(
                     edges=_TINY["edges"] + [
                         {"src": 2, "dst": 0, "bytes": 4}])),
      _json_case("json_dangling_edge", "edge to node 7 of 3",
                 r"edge 1: dst is 7: not a node index \(graph has 3 nodes\)",
                 reliability_case.tiny_document(
                     edges=[_TINY["edges"][0],
                            {"src": 1, "dst": 7, "bytes": 4}])),
      _json_case("json_duplicate_name", "two nodes named 'a'",
                 r"duplicate node name 'a'",
                 reliability_case.node_changed(1, name="a")),
      _json_case("json_nan_cost", "cost NaN", r"JSON contains NaN",
                 json.dumps(reliability_case.node_changed(
                     0, cost={"GPU": math_nan()})),
                 error=errors.GraphLoadError),
      _json_case("json_negative_cost", "cost -5",
                 r"cost\[GPU\] is -5.0: must be finite and >= 0",
                 reliability_case.node_changed(0, cost={"GPU": -5})),
      _json_case("json_huge_cost", "cost 1e300 us",
                 r"cost\[GPU\] is 1e\+300 us: over the limit of 1e\+15 us",
                 reliability_case.node_changed(0, cost={"GPU": 1e300})),
      _json_case("json_overflowing_cost", "cost given as a 400-digit integer",
                 r"cost\[GPU\] is inf: must be finite",
                 '{"format": "tf-gdp-opgraph", "version": 1, "name": "t", '
                 '"nodes": [{"name": "a", "op": "X", "cost": {"GPU": 1'
                 + "0" * 400 + '}, "output_bytes": 0, "memory_bytes": 0}], '
                 '"edges": []}'),
      _json_case("json_huge_bytes", "output_bytes adding up past 2**62",
                 r"output_bytes add up to \d+ bytes: over the limit",
                 reliability_case.tiny_document(
                     nodes=[dict(n, output_bytes=(1 << 62) - 1)
                            for n in _TINY["nodes"]])),
      _json_case("json_10m_empty_nodes",
                 "op-graph JSON with 10 million empty node objects (30 MB)",
                 r"10000000 nodes is over the limit 5000000",
                 lambda: ('{"format": "tf-gdp-opgraph", "version": 1, '
                          '"name": "x", "edges": [], "nodes": [' +
                          ",".join(["{}"] * 10_000_000) + "]}"),
                 slow=True, export=False),
      _json_case("json_deep_nesting", "JSON nested 100000 levels deep",
                 r"JSON nested too deeply", "[" * 100_000 + "]" * 100_000,
                 error=errors.GraphLoadError),
      _json_case("json_deep_metadata", "metadata nested 200 levels deep",
                 r"metadata is nested deeper than 32 levels",
                 '{"format": "tf-gdp-opgraph", "version": 1, "name": "t", '
                 '"nodes": [{"name": "a", "op": "X", "cost": {"GPU": 1}, '
                 '"output_bytes": 0, "memory_bytes": 0}], "edges": [], '
                 '"metadata": ' + '{"k": ' * 200 + "1" + "}" * 200 + "}"),
      _json_case("json_zero_nodes", "op-graph JSON with no nodes",
                 r"graph has no nodes",
                 reliability_case.tiny_document(nodes=[], edges=[])),
      _json_case("json_unknown_op_with_costs",
                 "op type 'MyCustomKernel' the cost model never saw, with "
                 "costs given", r"^loaded 3 nodes$",
                 reliability_case.node_changed(0, op="MyCustomKernel"),
                 error=None, export=False),
      # -- topologies --
      _topology_case("topology_zero_devices", "topology with no devices",
                     r"topology 't' has no devices",
                     reliability_case.topology_document([], [])),
      _topology_case("topology_zero_bandwidth",
                     "topology with a 0 GB/s link",
                     r"every link needs a bandwidth > 0",
                     reliability_case.topology_document(
                         reliability_case.gpus(2), [[0.0, 0.0], [0.0, 0.0]])),
      _topology_case("topology_nan", "topology with a NaN latency",
                     r"not a topology JSON file: NaN is not allowed",
                     json.dumps(reliability_case.two_gpu_topology()).replace(
                         '"latency_us": [[0.0, 0.0]',
                         '"latency_us": [[0.0, NaN]')),
      _topology_case("topology_huge_memory", "device with 2**70 bytes",
                     r"memory_bytes must be a positive integer below 2\*\*62",
                     reliability_case.topology_document(
                         reliability_case.gpus(1, 1 << 70), [[0.0]])),
      reliability_case.Case(
          name="unknown_devices", given="--devices=tpu9000",
          expect=r"unknown devices 'tpu9000'",
          api=lambda tmp: _get_topology("tpu9000"),
          cli=lambda tmp: reliability_case.place_cli(
              tmp, reliability_case.write(tmp, "graph.json",
                                          json.dumps(_TINY)), "tpu9000"),
          test="tests/test_reliability_inputs.py::test_api[unknown_devices]",
          slow=True),
  ]
