"""Reliability cases about runs: placing, measuring and repeating.

Graphs no placement can run (`errors.InfeasibleError`), placement files that
do not fit the graph (`PlacementError`, and their `command` is never run),
placement files `tf-gdp evaluate` cannot judge, a graph whose step reaches
outside it (refused before it runs), measurements that fail (a kernel error,
out of memory, a hung step, a killed worker: the API returns an invalid
Measurement, or a retried valid one) and baselines that must give the same
placement twice for one seed.
"""

import json
import os
from typing import Callable, List, Sequence

import numpy as np

from tf_gdp import errors
from tf_gdp.bench import reliability_case


def _place_case(name, given, expect, document,
                devices) -> reliability_case.Case:
  """A graph that no placement on `devices` can run (InfeasibleError)."""

  def files(tmp):
    graph = reliability_case.write(tmp, "graph.json", json.dumps(document))
    if isinstance(devices, dict):
      return graph, reliability_case.write(tmp, "topology.json",
                                           json.dumps(devices))
    return graph, devices

  def api(tmp):
    from tf_gdp import placing  # pylint: disable=g-import-not-at-top
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
    graph, topo = files(tmp)
    placing.place(json_io.load_json(graph), topology.get(topo),
                  "single_device", compare=())

  def cli(tmp):
    return reliability_case.place_cli(tmp, *files(tmp))

  return reliability_case.Case(
      name=name, given=given, expect=expect, api=api,
      error=errors.InfeasibleError, cli=cli,
      test=f"tests/test_reliability_inputs.py::test_api[{name}]", slow=True)


def _placement_file_case(name, given, expect,
                         placement_doc) -> reliability_case.Case:
  """A placement file given to `placement_file.load` for the tiny graph."""

  def api(tmp):
    from tf_gdp import placement_file  # pylint: disable=g-import-not-at-top
    from tf_gdp.cost import topology  # pylint: disable=g-import-not-at-top
    from tf_gdp.graph import json_io  # pylint: disable=g-import-not-at-top
    doc = placement_doc(tmp) if callable(placement_doc) else placement_doc
    path = reliability_case.write(tmp, "placement.json", json.dumps(doc))
    graph = json_io.from_document(reliability_case.tiny_document())
    try:
      placement_file.load(graph, topology.custom(
          "two", [topology.Device(d["name"], "GPU", d["memory_bytes"])
                  for d in reliability_case.gpus(2)], [[0, 1.0], [1.0, 0]],
          [[0, 1.0], [1.0, 0]]), path)
    finally:
      if os.path.exists(os.path.join(tmp, "pwned")):
        raise AssertionError("a placement file's command was executed")

  return reliability_case.Case(
      name=name, given=given, expect=expect, api=api,
      error=errors.PlacementError,
      test=f"tests/test_reliability_inputs.py::test_api[{name}]")


def _placement_for(tmp: str, ops: Sequence[str]) -> dict:
  gpu0 = reliability_case.gpus(1)[0]["name"]
  return {"format": "tf-gdp-placement", "version": 1, "method": "random",
          "graph": "other", "graph_fingerprint": "0" * 64,
          "command": f"touch {os.path.join(tmp, 'pwned')}",
          "placement": {op: gpu0 for op in ops}}


def _evaluate_case(name, given, expect, placement_doc, *,
                   error=errors.PlacementError,
                   with_devices=True) -> reliability_case.Case:
  """A placement file given to `tf-gdp evaluate` for the tiny graph.

  `placement_doc`: tmp -> the file's JSON object, or None for no file.
  """

  def files(tmp):
    graph = reliability_case.write(tmp, "graph.json",
                                   json.dumps(reliability_case.tiny_document()))
    topo = reliability_case.write(
        tmp, "topology.json", json.dumps(reliability_case.two_gpu_topology()))
    if placement_doc is not None:
      reliability_case.write(tmp, "placement.json",
                             json.dumps(placement_doc(tmp)))
    return (graph, os.path.join(tmp, "placement.json"),
            topo if with_devices else None)

  def api(tmp):
    from tf_gdp import evaluation  # pylint: disable=g-import-not-at-top
    graph, placement, devices = files(tmp)
    evaluation.evaluate(graph, placement, devices=devices)

  def cli(tmp):
    graph, placement, devices = files(tmp)
    out = os.path.join(tmp, reliability_case.OUT, "evaluation.json")
    return [["evaluate", f"--graph={graph}", f"--placement={placement}",
             f"--json_out={out}"] +
            ([f"--devices={devices}"] if devices else [])]

  return reliability_case.Case(
      name=name, given=given, expect=expect, api=api, error=error, cli=cli,
      test=f"tests/test_reliability_inputs.py::test_api[{name}]")


def _tiny_placement(devices) -> dict:
  """A placement file of the tiny graph on topology 't': ops a, b, c."""
  return {"format": "tf-gdp-placement", "version": 1, "method": "by hand",
          "graph": "tiny", "topology": "t",
          "placement": dict(zip("abc", devices))}


def _side_effects_refused(tmp) -> str:
  """Measuring a step that writes a file: refused, and the file not written."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  path = os.path.join(tmp, "written.txt")

  @tf.function
  def step(x):
    tf.io.write_file(path, tf.strings.as_string(x))
    return x * 2.0

  extracted = extract.from_function(step, tf.ones([]))
  try:
    measure.measure(extracted, {}, "local", warmup=0, repeats=1)
  finally:
    if os.path.exists(path):
      raise AssertionError("the refused step wrote its file")
  return "measured"


def _measure_case(name, given, expect, run, test,
                  slow=False) -> reliability_case.Case:
  return reliability_case.Case(name=name, given=given, expect=expect,
                               api=lambda tmp: run(), error=None, test=test,
                               slow=slow)


def _measure_local(function, args, feed=None, timeout_s=60.0,
                   allow_side_effects=False) -> str:
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  extracted = extract.from_function(function, *args)
  cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0"
  result = measure.measure(
      extracted, {node.name: cpu0 for node in extracted.graph_def.node},
      "local", example_args=feed or [], warmup=0, repeats=1,
      timeout_s=timeout_s, allow_side_effects=allow_side_effects)
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
  line = _measure_local(step, [tf.ones([4])], timeout_s=0.3,
                        allow_side_effects=True)  # py_function
  return f"{line} after {time.monotonic() - started:.1f} s"


def _killed_worker() -> str:
  """A cpu-workers process SIGKILLed during the timed steps."""
  import signal  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from tf_gdp.runtime import placed_session
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


def cases() -> List[reliability_case.Case]:
  """The run cases, in the order of the docs table."""
  tiny = reliability_case.tiny_document()
  result = [
      # -- placements that cannot exist --
      _place_case("op_bigger_than_any_device",
                  "an op needing 3 GiB on 1 GiB devices",
                  r"infeasible: op 'a' \(MatMul\) needs 3\.00 GiB .* but the "
                  r"largest device it may use, .*GPU:\d, has 1\.00 GiB",
                  reliability_case.node_changed(0, memory_bytes=3 << 30),
                  reliability_case.two_gpu_topology()),
      _place_case("graph_bigger_than_all_devices",
                  "3 ops of 0.75 GiB persistent on two 1 GiB devices",
                  r"infeasible: the graph needs at least 2\.25 GiB .* but the "
                  r"2 devices of 't' have 2\.00 GiB \(\d+ bytes\) in total",
                  reliability_case.tiny_document(
                      nodes=[dict(n, memory_bytes=3 << 28)
                             for n in tiny["nodes"]]),
                  reliability_case.two_gpu_topology()),
      _place_case("pinned_to_missing_device",
                  "op pinned to /device:GPU:7 on p100x4",
                  r"infeasible: op 'b' \(Relu\) is pinned to '/device:GPU:7', "
                  r"but topology 'p100x4' has no such device",
                  reliability_case.node_changed(1, device="/device:GPU:7"),
                  "p100x4"),
      # -- placement files --
      _placement_file_case(
          "placement_for_other_graph",
          "placement file of another graph (its command: touch pwned)",
          r"does not match graph 'tiny': 3 of its ops have no device "
          r"\(e\.g\. 'a', 'b', 'c'\), and the file places 2 ops the graph "
          r"lacks", lambda tmp: _placement_for(tmp, ["x", "../../etc/y"])),
      # -- placement files given to `tf-gdp evaluate` --
      _evaluate_case(
          "evaluate_other_graph", "evaluate: placement file of another graph",
          r"does not match graph 'tiny': 3 of its ops have no device",
          lambda tmp: _placement_for(tmp, ["x", "y"])),
      _evaluate_case(
          "evaluate_unknown_device",
          "evaluate: placement file naming GPU:7 on a 2-GPU topology",
          r"placement\.json places ops on '.*device:GPU:7', which topology "
          r"'t' does not have",
          lambda tmp: _tiny_placement([reliability_case.gpus(8)[i]["name"]
                                       for i in (0, 7, 0)])),
      _evaluate_case(
          "evaluate_missing_placement", "evaluate: no placement file",
          r"placement\.json: no such placement file", None,
          error=errors.InputError),
      _evaluate_case(
          "evaluate_topology_not_a_preset",
          "evaluate without --devices, for a file made on topology 't'",
          r"was made for topology 't', which is not a preset: pass --devices",
          lambda tmp: _tiny_placement([reliability_case.gpus(1)[0]["name"]] *
                                      3),
          error=errors.InputError, with_devices=False),
      # -- a graph whose step reaches outside it --
      reliability_case.Case(
          name="measure_side_effects",
          given="measuring a step that writes a file (tf.io.write_file)",
          expect=r"^the graph has ops that reach outside the step \(files, "
          r"Python callbacks, the network\): WriteFile '[^']*'; not running "
          r"it: pass --allow_side_effects \(allow_side_effects=True in "
          r"Python\) to run them anyway$",
          api=_side_effects_refused,
          test="tests/test_reliability_inputs.py::"
          "test_api[measure_side_effects]"),
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
    result.append(reliability_case.Case(
        name=f"deterministic_{method}",
        given=f"{method} twice with seed 11 on a 300-op graph",
        expect=r"^same placement twice", api=_deterministic(method, **options),
        error=None, slow=method == "hdp",
        test="tests/test_reliability_inputs.py::"
        f"test_api[deterministic_{method}]"))
  return result
