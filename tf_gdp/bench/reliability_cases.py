"""Every hostile, broken or impossible input tf-gdp must refuse cleanly.

One list (`CASES`) serves both `python -m tf_gdp.bench.reliability_check`
and the parametrized tests, so the table in docs/RELIABILITY.md, the script
and the tests cannot drift apart. A case builds its inputs in a temp folder,
then either

* calls the Python API, which must raise the typed error (`error`) whose one
  line matches `expect`, or return an outcome line matching `expect`
  (`error=None`: e.g. an invalid Measurement's reason); and/or
* names CLI invocations (`cli`), each of which must exit with code 2 and one
  `error: ...` line on stderr matching `expect`, with no traceback and no
  file left in the output folder.

Cases whose CLI run would cost a TF import or a large file are `slow`; the
tests run those once, the script every time.
"""

import contextlib
import dataclasses
import json
import os
import random
from typing import Callable, List, Optional, Sequence

import numpy as np

from tf_gdp import errors

OUT = "out"  # CLI output folder inside the case's temp folder
_TOPOLOGY_FORMAT = {"format": "tf-gdp-topology", "version": 1}


@dataclasses.dataclass(frozen=True)
class Case:
  """One reliability case.

  Attributes:
    name: short id (pytest id, table row).
    given: what the user gives, in words.
    expect: regex the one-line outcome must match.
    api: tmp dir -> None (raises `error`) or an outcome line.
    error: the InputError subclass the API raises; None when the API
      returns an outcome line instead.
    cli: tmp dir -> argv lists for `python -m tf_gdp` (after the API ran,
      so its inputs exist); None for API-only cases.
    env: extra environment for both (e.g. a lowered size limit).
    test: the test that proves the case (docs table).
    slow: the CLI (or the API) takes seconds; tests run it sparingly.
  """
  name: str
  given: str
  expect: str
  api: Callable[[str], Optional[str]]
  error: Optional[type] = errors.InputError
  cli: Optional[Callable[[str], List[List[str]]]] = None
  env: Optional[dict] = None
  test: str = ""
  slow: bool = False


# ---- input builders ------------------------------------------------------------


def _write(tmp: str, name: str, data) -> str:
  path = os.path.join(tmp, name)
  if isinstance(data, str):
    data = data.encode("utf-8")
  with open(path, "wb") as f:
    f.write(data)
  return path


def tiny_document(**changes) -> dict:
  """A valid 3-op op-graph document (a -> b -> c), with fields replaced."""
  nodes = [{"name": name, "op": op, "cost": {"GPU": cost},
            "output_bytes": 1024, "memory_bytes": 0}
           for name, op, cost in (("a", "MatMul", 5.0), ("b", "Relu", 1.0),
                                  ("c", "Relu", 1.0))]
  document = {"format": "tf-gdp-opgraph", "version": 1, "name": "tiny",
              "nodes": nodes,
              "edges": [{"src": 0, "dst": 1, "bytes": 1024},
                        {"src": 1, "dst": 2, "bytes": 1024}]}
  document.update(changes)
  return document


def _node_changed(index: int, **fields) -> dict:
  document = tiny_document()
  document["nodes"][index].update(fields)
  return document


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


def _topology(devices, bandwidth, **extra) -> dict:
  d = len(devices)
  return dict(_TOPOLOGY_FORMAT, name="t", hardware={"GPU": "p100"},
              devices=devices,
              links={"bandwidth_gbps": bandwidth,
                     "latency_us": [[0.0] * d for _ in range(d)]}, **extra)


def _gpus(count: int, memory: int = 1 << 30) -> list:
  return [{"name": f"/job:localhost/replica:0/task:0/device:GPU:{i}",
           "kind": "GPU", "memory_bytes": memory} for i in range(count)]


def _two_gpu_topology(memory: int = 1 << 30) -> dict:
  return _topology(_gpus(2, memory), [[0.0, 10.0], [10.0, 0.0]])


# ---- what each kind of case calls ----------------------------------------------


@contextlib.contextmanager
def environment(env: Optional[dict]):
  """Sets environment variables for the duration (the API side of `env`)."""
  saved = {key: os.environ.get(key) for key in (env or {})}
  os.environ.update(env or {})
  try:
    yield
  finally:
    for key, value in saved.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value


def _load(path: str) -> str:
  from tf_gdp import graph_specs  # pylint: disable=g-import-not-at-top
  graph = graph_specs.load(path).graph
  return f"loaded {graph.num_nodes} nodes"


def _graph_file_case(name, given, expect, filename, data, *,
                     error=errors.GraphLoadError, env=None, slow=False,
                     export=True) -> Case:
  """A graph file given to `graph_specs.load`, `inspect` and `export-graph`."""

  def api(tmp):
    path = os.path.join(tmp, filename)
    if data is not None:  # None: the file is missing
      _write(tmp, filename, data() if callable(data) else data)
    return _load(path)

  def cli(tmp):
    path = os.path.join(tmp, filename)
    runs = [["inspect", f"--graph={path}"]]
    if export:
      runs.append(["export-graph", f"--graph={path}",
                   f"--out={os.path.join(tmp, OUT, 'exported.json')}"])
    return runs

  return Case(name=name, given=given, expect=expect, api=api,
              error=error, cli=cli, env=env,
              test=f"tests/test_reliability_inputs.py::test_api[{name}]",
              slow=slow)


def _json_case(name, given, expect, document, **kwargs) -> Case:
  """`document`: a dict, raw text or bytes, or a function returning one."""

  def text():
    value = document() if callable(document) else document
    return value if isinstance(value, (str, bytes)) else json.dumps(value)

  kwargs.setdefault("error", errors.GraphFormatError)
  return _graph_file_case(name, given, expect, "graph.json", text, **kwargs)


def _place_cli(tmp: str, graph: str, devices: str) -> List[List[str]]:
  return [["place", f"--graphs={graph}", f"--devices={devices}",
           "--method=single_device", "--compare=", "--nopictures",
           f"--out={os.path.join(tmp, OUT)}"]]


def _topology_case(name, given, expect, document) -> Case:
  """A topology file given to `topology.get` and to `place --devices`."""

  def api(tmp):
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    text = document if isinstance(document, str) else json.dumps(document)
    topology.get(_write(tmp, "topology.json", text))

  def cli(tmp):
    graph = _write(tmp, "graph.json", json.dumps(tiny_document()))
    return _place_cli(tmp, graph, os.path.join(tmp, "topology.json"))

  return Case(name=name, given=given, expect=expect, api=api, cli=cli,
              test=f"tests/test_reliability_inputs.py::test_api[{name}]",
              slow=True)


def _place_case(name, given, expect, document, devices) -> Case:
  """A graph that no placement on `devices` can run (InfeasibleError)."""

  def files(tmp):
    graph = _write(tmp, "graph.json", json.dumps(document))
    if isinstance(devices, dict):
      return graph, _write(tmp, "topology.json", json.dumps(devices))
    return graph, devices

  def api(tmp):
    from tf_gdp import placing  # pylint: disable=g-import-not-at-top
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
    graph, topo = files(tmp)
    placing.place(json_io.load_json(graph), topology.get(topo),
                  "single_device", compare=())

  def cli(tmp):
    return _place_cli(tmp, *files(tmp))

  return Case(name=name, given=given, expect=expect, api=api,
              error=errors.InfeasibleError, cli=cli,
              test=f"tests/test_reliability_inputs.py::test_api[{name}]",
              slow=True)


def _placement_file_case(name, given, expect, placement_doc) -> Case:
  """A placement file given to `placement_file.load` for the tiny graph."""

  def api(tmp):
    from tf_gdp import placement_file  # pylint: disable=g-import-not-at-top
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
    doc = placement_doc(tmp) if callable(placement_doc) else placement_doc
    path = _write(tmp, "placement.json", json.dumps(doc))
    graph = json_io.from_document(tiny_document())
    try:
      placement_file.load(graph, topology.custom(
          "two", [topology.Device(d["name"], "GPU", d["memory_bytes"])
                  for d in _gpus(2)], [[0, 1.0], [1.0, 0]],
          [[0, 1.0], [1.0, 0]]), path)
    finally:
      if os.path.exists(os.path.join(tmp, "pwned")):
        raise AssertionError("a placement file's command was executed")

  return Case(name=name, given=given, expect=expect, api=api,
              error=errors.PlacementError,
              test=f"tests/test_reliability_inputs.py::test_api[{name}]")


def _placement_for(tmp: str, ops: Sequence[str]) -> dict:
  gpu0 = _gpus(1)[0]["name"]
  return {"format": "tf-gdp-placement", "version": 1, "method": "random",
          "graph": "other", "graph_fingerprint": "0" * 64,
          "command": f"touch {os.path.join(tmp, 'pwned')}",
          "placement": {op: gpu0 for op in ops}}


# ---- measurement and determinism cases (outcome lines, not errors) --------------


def _measure_case(name, given, expect, run, test, slow=False) -> Case:
  return Case(name=name, given=given, expect=expect, api=lambda tmp: run(),
              error=None, test=test, slow=slow)


def _measure_local(function, args, feed=None, timeout_s=60.0) -> str:
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  extracted = extract.from_function(function, *args)
  cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0"
  result = measure.measure(
      extracted, {node.name: cpu0 for node in extracted.graph_def.node},
      "local", example_args=feed or [], warmup=0, repeats=1,
      timeout_s=timeout_s)
  return f"valid={result.valid}: {result.reason}"


def _nan_kernel() -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  @tf.function
  def step(x):
    return tf.debugging.check_numerics(tf.math.log(x), "log of x") * 2.0

  return _measure_local(step, [tf.ones([4])],
                        feed=[np.array([-1.0, 1.0, 1.0, 1.0], np.float32)])


def _out_of_memory() -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not oom_test_is_safe():
    return "skipped: vm.overcommit_memory=1 could really allocate"

  @tf.function
  def step(n):
    # 2**46 floats = 256 TiB: more than the address space, so the
    # allocation fails at once whatever the free memory.
    return tf.reduce_sum(tf.fill(tf.stack([n, n]), 1.0))

  return _measure_local(step, [tf.constant(1 << 23)],
                        feed=[np.int32(1 << 23)])


def oom_test_is_safe() -> bool:
  """An impossible allocation fails only if the kernel refuses overcommit."""
  try:
    with open("/proc/sys/vm/overcommit_memory", encoding="utf-8") as f:
      return f.read().strip() != "1"
  except OSError:
    return False


def _hung_kernel() -> str:
  import time  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def sleep(x):
    time.sleep(4.0)
    return x

  @tf.function
  def step(x):
    return tf.py_function(sleep, [x], tf.float32) * 2.0

  started = time.monotonic()
  line = _measure_local(step, [tf.ones([4])], timeout_s=0.3)
  return f"{line} after {time.monotonic() - started:.1f} s"


def _killed_worker() -> str:
  """A cpu-workers process SIGKILLed during the timed steps."""
  import signal  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import placed_session  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top

  weights = tf.Variable(tf.ones([32, 32]) * 0.01)

  @tf.function
  def step():
    return tf.reduce_sum(tf.matmul(weights, weights))

  extracted = extract.from_function(step)
  with workers.CpuWorkerCluster(1) as cluster:
    kill_once = [cluster.pids[0]]
    real_step = placed_session.Runner.step

    def step_that_loses_its_worker(runner):
      if kill_once:
        os.kill(kill_once.pop(), signal.SIGKILL)
      return real_step(runner)

    placed_session.Runner.step = step_that_loses_its_worker
    try:
      result = measure.measure(extracted, {}, cluster, warmup=1, repeats=2,
                               timeout_s=30.0)
    finally:
      placed_session.Runner.step = real_step
    return (f"valid={result.valid} after {result.attempts} attempts, "
            f"restarts {cluster.restarts}"
            + (f": {result.reason}" if result.reason else ""))


def _deterministic(method: str, **options) -> Callable[[str], str]:
  """Runs a baseline twice with one seed; the placements must be equal."""

  def run(tmp):
    del tmp
    from tf_gdp import baselines  # pylint: disable=g-import-not-at-top
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    from tf_gdp.graph import generators  # pylint: disable=g-import-not-at-top
    graph = generators.random_layered_graph(300, width=20, seed=5)
    topo = topology.get("p100x4")
    first, second = (baselines.run(method, graph, topo, seed=11,
                                   **options).placement for _ in range(2))
    same = np.array_equal(first, second)
    return (f"{'same' if same else 'DIFFERENT'} placement twice "
            f"({graph.num_nodes} ops, {len(np.unique(first))} devices used)")

  return run


# ---- the list --------------------------------------------------------------------

_TINY = tiny_document()


def _cases() -> List[Case]:
  rng = random.Random(0)
  random_bytes = bytes(rng.getrandbits(8) for _ in range(4096))
  cases = [
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
                       "graph.json", json.dumps(tiny_document(
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
                 tiny_document(edges=_TINY["edges"] + [
                     {"src": 2, "dst": 0, "bytes": 4}])),
      _json_case("json_dangling_edge", "edge to node 7 of 3",
                 r"edge 1: dst is 7: not a node index \(graph has 3 nodes\)",
                 tiny_document(edges=[_TINY["edges"][0],
                                      {"src": 1, "dst": 7, "bytes": 4}])),
      _json_case("json_duplicate_name", "two nodes named 'a'",
                 r"duplicate node name 'a'", _node_changed(1, name="a")),
      _json_case("json_nan_cost", "cost NaN", r"JSON contains NaN",
                 json.dumps(_node_changed(0, cost={"GPU": math_nan()})),
                 error=errors.GraphLoadError),
      _json_case("json_negative_cost", "cost -5",
                 r"cost\[GPU\] is -5.0: must be finite and >= 0",
                 _node_changed(0, cost={"GPU": -5})),
      _json_case("json_huge_cost", "cost 1e300 us",
                 r"cost\[GPU\] is 1e\+300 us: over the limit of 1e\+15 us",
                 _node_changed(0, cost={"GPU": 1e300})),
      _json_case("json_overflowing_cost", "cost given as a 400-digit integer",
                 r"cost\[GPU\] is inf: must be finite",
                 '{"format": "tf-gdp-opgraph", "version": 1, "name": "t", '
                 '"nodes": [{"name": "a", "op": "X", "cost": {"GPU": 1'
                 + "0" * 400 + '}, "output_bytes": 0, "memory_bytes": 0}], '
                 '"edges": []}'),
      _json_case("json_huge_bytes", "output_bytes adding up past 2**62",
                 r"output_bytes add up to \d+ bytes: over the limit",
                 tiny_document(nodes=[dict(n, output_bytes=(1 << 62) - 1)
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
                 r"graph has no nodes", tiny_document(nodes=[], edges=[])),
      _json_case("json_unknown_op_with_costs",
                 "op type 'MyCustomKernel' the cost model never saw, with "
                 "costs given", r"^loaded 3 nodes$",
                 _node_changed(0, op="MyCustomKernel"), error=None,
                 export=False),
      # -- topologies --
      _topology_case("topology_zero_devices", "topology with no devices",
                     r"topology 't' has no devices", _topology([], [])),
      _topology_case("topology_zero_bandwidth",
                     "topology with a 0 GB/s link",
                     r"every link needs a bandwidth > 0",
                     _topology(_gpus(2), [[0.0, 0.0], [0.0, 0.0]])),
      _topology_case("topology_nan", "topology with a NaN latency",
                     r"not a topology JSON file: NaN is not allowed",
                     json.dumps(_two_gpu_topology()).replace(
                         '"latency_us": [[0.0, 0.0]',
                         '"latency_us": [[0.0, NaN]')),
      _topology_case("topology_huge_memory", "device with 2**70 bytes",
                     r"memory_bytes must be a positive integer below 2\*\*62",
                     _topology(_gpus(1, 1 << 70), [[0.0]])),
      Case(name="unknown_devices", given="--devices=tpu9000",
           expect=r"unknown devices 'tpu9000'",
           api=lambda tmp: _get_topology("tpu9000"),
           cli=lambda tmp: _place_cli(
               tmp, _write(tmp, "graph.json", json.dumps(_TINY)), "tpu9000"),
           test="tests/test_reliability_inputs.py::test_api[unknown_devices]",
           slow=True),
      # -- placements that cannot exist --
      _place_case("op_bigger_than_any_device",
                  "an op needing 3 GiB on 1 GiB devices",
                  r"infeasible: op 'a' \(MatMul\) needs 3\.00 GiB .* but the "
                  r"largest device it may use, .*GPU:\d, has 1\.00 GiB",
                  _node_changed(0, memory_bytes=3 << 30),
                  _two_gpu_topology()),
      _place_case("graph_bigger_than_all_devices",
                  "3 ops of 0.75 GiB persistent on two 1 GiB devices",
                  r"infeasible: the graph needs at least 2\.25 GiB .* but the "
                  r"2 devices of 't' have 2\.00 GiB \(\d+ bytes\) in total",
                  tiny_document(nodes=[dict(n, memory_bytes=3 << 28)
                                       for n in _TINY["nodes"]]),
                  _two_gpu_topology()),
      _place_case("pinned_to_missing_device",
                  "op pinned to /device:GPU:7 on p100x4",
                  r"infeasible: op 'b' \(Relu\) is pinned to '/device:GPU:7', "
                  r"but topology 'p100x4' has no such device",
                  _node_changed(1, device="/device:GPU:7"), "p100x4"),
      # -- placement files --
      _placement_file_case(
          "placement_for_other_graph",
          "placement file of another graph (its command: touch pwned)",
          r"does not match graph 'tiny': 3 of its ops have no device "
          r"\(e\.g\. 'a', 'b', 'c'\), and the file places 2 ops the graph "
          r"lacks", lambda tmp: _placement_for(tmp, ["x", "../../etc/y"])),
      # -- measurements (the API returns an invalid Measurement) --
      _measure_case("measure_kernel_error",
                    "placed step whose check_numerics sees NaN",
                    r"valid=False: kernel error: log of x : Tensor had NaN",
                    _nan_kernel, "tests/test_measure.py::"
                    "test_check_numerics_failure_is_an_invalid_measurement"),
      _measure_case("measure_out_of_memory",
                    "placed step allocating 256 TiB",
                    r"valid=False: out of memory: OOM when allocating|skipped",
                    _out_of_memory, "tests/test_measure.py::"
                    "test_out_of_memory_is_an_invalid_measurement", slow=True),
      _measure_case("measure_hang",
                    "placed step with a 4 s py_function, timeout 0.3 s",
                    r"valid=False: timeout: the step did not return within "
                    r"1\.3 s .* after [0-3]\.\d s",
                    _hung_kernel, "tests/test_measure.py::"
                    "test_kernel_that_ignores_cancellation_times_out",
                    slow=True),
      _measure_case("measure_worker_killed",
                    "cpu-workers process SIGKILLed mid-measurement",
                    r"valid=True after 2 attempts, restarts \[1\]",
                    _killed_worker, "tests/test_workers.py::"
                    "test_worker_killed_mid_measurement_is_restarted_and_"
                    "retried", slow=True),
  ]
  for method, options in (("random", {}), ("metis", {}), ("m_etf", {}),
                          ("hdp", {"budget": 16, "placer_hidden": 32,
                                   "grouper_hidden": 16})):
    cases.append(Case(
        name=f"deterministic_{method}",
        given=f"{method} twice with seed 11 on a 300-op graph",
        expect=r"^same placement twice", api=_deterministic(method, **options),
        error=None, slow=method == "hdp",
        test="tests/test_reliability_inputs.py::"
        f"test_api[deterministic_{method}]"))
  return cases


def math_nan() -> float:
  return float("nan")


def _get_topology(spec: str) -> None:
  from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
  topology.get(spec)


CASES = _cases()
BY_NAME = {case.name: case for case in CASES}
