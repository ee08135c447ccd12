"""`gdp.place()`: place a tf.function's ops on devices and run it placed.

    import tf_gdp as gdp

    step = gdp.place(train_step, x, y, devices="local", method="gdp")
    loss = step(x, y)        # runs with the placement, updates the variables
    step.placement           # op name -> device
    step.report()            # predicted step time, baselines, bound, memory
    step.save("step.placement.json")

    again = gdp.place(train_step, x, y, devices="local",
                      placement=gdp.load_placement("step.placement.json"))

    @gdp.place(devices="local-cpus:2", method="metis")
    def step(x, y): ...      # placed on the first call, for its arguments

The function is traced once for the example arguments, flattened into one
graph (`grappler_bridge.extract`), costed for the devices' hardware, placed
by `tf_gdp.placing` (or a placement file is re-applied by op name), and run
through `grappler_bridge.rewrite.placed_function`, which feeds the caller's
own variable handles: a placed training step updates the same variables.
TensorFlow is imported only when a function is placed.
"""

import dataclasses
import functools
import inspect
import logging
import os
import threading
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from grappler_bridge import errors as grappler_errors

from tf_gdp import confirm_placement
from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import placement_file
from tf_gdp import placing
from tf_gdp import target_devices
from tf_gdp.baselines import valid_result
from tf_gdp.cost import loop_caveat
from tf_gdp.cost import shape_caveat
from tf_gdp.cost import topology as topology_lib

LOCAL = target_devices.LOCAL
# `method` a report shows for a placement re-applied from a file.
LOADED = "loaded"
SIMULATE, MEASURE = "simulate", "measure"
BACKENDS = (SIMULATE, MEASURE)
Devices = target_devices.Devices


def load_placement(
    path: Union[str, os.PathLike]) -> placement_file.PlacementFile:
  """Reads a placement file (e.g. from `PlacedFunction.save`); InputError if bad.

  Hand the result to `place(..., placement=...)`: it is applied by op name.
  """
  return placement_file.read(os.fspath(path))


@dataclasses.dataclass(frozen=True)
class _Options:
  """How to place; checked when `place` is called, before any tracing."""
  devices: Devices
  method: str
  budget: float
  backend: str
  compare: tuple
  seed: int
  placement: Optional[placement_file.PlacementFile]
  policy: Optional[str]
  profile: bool = True
  confirm: bool = True
  allow_side_effects: bool = False

  def __post_init__(self):
    methods = placing.method_names()
    if self.placement is None and self.method not in methods:
      raise errors.InputError(
          f"unknown method {self.method!r}; choose from {', '.join(methods)}")
    if self.backend not in BACKENDS:
      raise errors.InputError(
          f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)}")
    if isinstance(self.budget, bool) or not isinstance(
        self.budget, (int, float)) or not self.budget >= 0:
      raise errors.InputError(f"budget must be seconds >= 0, got {self.budget!r}")
    for name in self.compare:
      if name not in methods or name in (placing.GDP, placing.AUTO):
        raise errors.InputError(f"cannot compare with {name!r}: not a baseline")
    if not isinstance(self.placement,
                      (placement_file.PlacementFile, type(None))):
      raise errors.InputError(
          "placement must come from gdp.load_placement (or be its path), got "
          f"{type(self.placement).__name__}")
    if not isinstance(self.devices, (str, os.PathLike, topology_lib.Topology,
                                     list, tuple)):
      raise errors.InputError(
          "devices must be a preset name, a topology JSON path, a Topology or "
          f"a list of TF device strings, got {type(self.devices).__name__}")


def place(fn: Optional[Callable] = None, *example_args,
          devices: Devices = LOCAL, method: str = placing.AUTO,
          budget: float = 0.0, backend: str = SIMULATE,
          compare: Sequence[str] = placing.DEFAULT_COMPARE, seed: int = 0,
          placement: Union[None, placement_file.PlacementFile, str,
                           os.PathLike] = None,
          policy: Optional[str] = None,
          example_kwargs: Optional[Mapping[str, Any]] = None,
          profile: bool = True, confirm: bool = True,
          allow_side_effects: bool = False):
  """Places `fn` on `devices`; returns a `PlacedFunction` (or a decorator).

  Args:
    fn: a tf.function or a plain Python function (wrapped in tf.function).
      Left out, `place(...)` returns a decorator.
    *example_args: arguments to trace `fn` with; placement happens now.
      Without them (and `example_kwargs`), it happens on the first call.
    devices: a preset name (`p100x4`, `local-cpus:2`, ...), a topology JSON
      path, a `Topology`, "local" (this process's GPUs if any, else its
      logical CPU devices as `local-cpus:K`), or a list of TF device strings
      and `tf.config.LogicalDevice`s (`["/device:CPU:0", "/device:CPU:1"]`:
      priced from the attached hardware, else from the matching preset;
      `tf_gdp.target_devices`).
    method: "auto" (the best valid placement of the shipped policy, the
      baselines and a local search), "gdp" (the shipped policy alone) or a
      baseline (`placing.method_names`).
    budget: gdp: seconds of fine-tuning on this graph after zero-shot;
      auto: seconds for each of its searches (fine-tuning, local search).
    backend: "simulate" (predicted step times) or "measure" (also time the
      chosen placement on the devices with the TF runtime).
    compare: baselines simulated beside the method for the report.
    seed: seeds sampling and randomized methods.
    placement: a `load_placement` result (or its path): applied by op name
      instead of searching; `method`, `budget` and `policy` are then unused.
    policy: gdp: a saved policy directory instead of the shipped one.
    example_kwargs: keyword arguments to trace `fn` with.
    profile: when the devices are this process's own, price the ops by a
      profile of the traced graph on them (a few steps, cached;
      `tf_gdp.runtime.profiled_costs`) instead of the roofline.
    confirm: when the devices can be timed (this process's GPUs, a
      `cpu-workers:K` cluster), measure the placement, the best compared
      baselines and one device before returning, and keep the best measured
      median (`tf_gdp.confirm_placement`); never slower than one device.
    allow_side_effects: run the step to profile, confirm or measure it even
      if it has ops that reach outside it (file writes and reads,
      `py_function`, network ops); without it, profiling and confirmation
      are skipped for such a function (the report says so) and backend
      "measure" refuses it before anything runs.

  Raises:
    InputError: bad options, or backend "measure" on a function with ops
      that reach outside the step; PlacementError: a placement that does
      not fit the function's graph or breaks a device constraint.
  """
  if isinstance(compare, str):
    compare = (compare,)
  if isinstance(placement, (str, os.PathLike)):
    placement = load_placement(placement)
  options = _Options(devices=devices, method=method, budget=budget,
                     backend=backend, compare=tuple(compare), seed=seed,
                     placement=placement, policy=policy, profile=profile,
                     confirm=confirm,
                     allow_side_effects=bool(allow_side_effects))
  if fn is None:
    if example_args or example_kwargs:
      raise errors.InputError("example arguments given without a function")
    return functools.partial(PlacedFunction, options=options)
  placed = PlacedFunction(fn, options=options)
  if example_args or example_kwargs:
    placed.place_for(*example_args, **dict(example_kwargs or {}))
  return placed


@dataclasses.dataclass
class _Placed:
  """Everything one placement of one trace needs to run and to report."""
  concrete: Any  # the ConcreteFunction that was placed
  extracted: Any  # grappler_bridge.extract.ExtractedGraph
  graph: Any  # tf_gdp.graph.OpGraph
  topology: topology_lib.Topology
  result: placing.PlaceResult
  device_map: Dict[str, str]
  costs: Optional[dict] = None  # what priced the ops (profiled_costs info)
  measured: Optional[dict] = None
  runner: Optional[Callable] = None


class PlacedFunction:
  """`fn` with every op on the device its placement chose.

  Calling it runs the placed step and returns what `fn` returns. It is placed
  for one trace of `fn` (the example arguments' shapes and dtypes); a call
  that needs another trace raises InputError.
  """

  def __init__(self, fn: Callable, *, options: _Options):
    if not callable(fn):
      raise errors.InputError(
          f"gdp.place needs a function, got {type(fn).__name__}")
    self._fn = _as_tf_function(fn)
    self._options = options
    self._state: Optional[_Placed] = None
    self._lock = threading.Lock()
    python_function = self._fn.python_function
    functools.update_wrapper(self, python_function, updated=())
    if not getattr(self, "__name__", None):  # e.g. a callable object
      self.__name__ = type(python_function).__name__
    # Binds a call's arguments with fn's defaults, as tracing did.
    self._signature = inspect.signature(python_function)

  # ---- placing ---------------------------------------------------------------

  def place_for(self, *args, **kwargs) -> "PlacedFunction":
    """Traces `fn` for these arguments and places it (once); returns self."""
    with self._lock:
      if self._state is None:
        self._state = self._place(args, kwargs)
    return self

  def _place(self, args, kwargs) -> _Placed:
    from grappler_bridge import extract  # pylint: disable=g-import-not-at-top
    options = self._options
    topo = target_devices.resolve(options.devices)
    try:
      concrete = self._fn.get_concrete_function(*args, **kwargs)
    except errors.InputError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # The caller's code, traced as a graph, failed: bad input, said once.
      raise errors.InputError(
          f"{self.__name__}: tracing it as a tf.function failed: "
          f"{_trace_error(e)}") from e
    extracted = extract.from_concrete_function(concrete)
    if options.backend == MEASURE:  # refused before any search or run
      from grappler_bridge import side_effects  # pylint: disable=g-import-not-at-top
      side_effects.check(extracted.graph_def, what=self.__name__,
                         allow_side_effects=options.allow_side_effects)
    runs_here = target_devices.runs_here(topo)
    graph, pins = _op_graph(extracted, topo, name=self.__name__,
                            pin_captures=runs_here)
    costs = {"source": "roofline"}
    if options.profile and runs_here:
      from tf_gdp.runtime import profiled_costs  # pylint: disable=g-import-not-at-top
      graph, costs = profiled_costs.profiled_graph(
          graph, extracted, topo, pinned=pins,
          allow_side_effects=options.allow_side_effects)
    loops = loop_caveat.caveat(graph, costs["source"])
    if loops:
      costs = {**costs, "loops": loops}
      logging.warning("%s: %s", graph.name, loops)
    shapes = shape_caveat.caveat(graph, advice=(
        "give the function an input_signature with every dimension known"))
    if shapes:  # a tf.function whose input_signature leaves dimensions open
      costs = {**costs, "inputs": shapes}
      logging.warning("%s: %s", graph.name, shapes)
    if options.placement is not None:
      result = _reapply(graph, topo, options.placement, options.compare,
                        options.seed)
    else:
      result = placing.place(
          graph, topo, options.method, budget_seconds=float(options.budget),
          policy=options.policy, seed=options.seed, compare=options.compare,
          extracted=extracted)
      if options.confirm:
        result = confirm_placement.confirm(
            result, graph, topo, extracted, seed=options.seed,
            allow_side_effects=options.allow_side_effects)
    if "repair" in result.details:
      logging.warning("%s: the placement on %s was repaired to fit memory "
                      "(%s)", self.__name__, topo.name,
                      result.details["repair"]["original_reason"])
    device_map = result.device_map(graph)
    _check_constraints(extracted, device_map, runs_here)
    state = _Placed(concrete, extracted, graph, topo, result, device_map,
                    costs=costs)
    if options.backend == MEASURE:
      state.measured = _measure(state, self._flat_args(state, args, kwargs),
                                runs_here, options.allow_side_effects)
    return state

  # ---- running ---------------------------------------------------------------

  def __call__(self, *args, **kwargs):
    if self._state is None:
      self.place_for(*args, **kwargs)
    state = self._state
    flat = self._flat_args(state, args, kwargs)
    if state.runner is None:
      from grappler_bridge import rewrite  # pylint: disable=g-import-not-at-top
      state.runner = rewrite.placed_function(state.extracted, state.device_map)
    return _pack_outputs(state.concrete.structured_outputs,
                         state.runner(*flat))

  def _flat_args(self, state: _Placed, args, kwargs) -> list:
    """The call's tensor arguments in the order of the traced graph's inputs."""
    concrete = self._fn.get_concrete_function(*args, **kwargs)
    if concrete is not state.concrete:
      raise errors.InputError(
          f"{self.__name__} was placed for inputs "
          f"{_describe_inputs(state.concrete)}, but this call needs another "
          f"trace ({_describe_inputs(concrete)}); place it again for them")
    try:
      bound = self._signature.bind(*args, **kwargs)
    except TypeError as e:
      raise errors.InputError(f"{self.__name__}: {e}") from e
    bound.apply_defaults()
    function_type = concrete.function_type
    return list(function_type.unpack_inputs(
        function_type.bind(*bound.args, **bound.kwargs)))

  # ---- results ---------------------------------------------------------------

  @property
  def placement(self) -> Dict[str, str]:
    """op name -> device name."""
    return dict(self._placed().device_map)

  @property
  def topology(self) -> topology_lib.Topology:
    return self._placed().topology

  @property
  def result(self) -> placing.PlaceResult:
    return self._placed().result

  def report(self) -> dict:
    """`PlaceResult.report()` plus memory and op counts per device by name."""
    state = self._placed()
    report = state.result.report()
    names = state.result.device_names
    counts = {name: 0 for name in names}
    for device in state.device_map.values():
      counts[device] += 1
    bound = state.result.lower_bound_us
    report.update(
        backend=self._options.backend,
        predicted_step_time_us=state.result.step_time_us,
        ratio_to_lower_bound=(state.result.step_time_us / bound
                              if bound > 0 else None),
        memory_per_device=dict(zip(names, report["peak_memory_bytes"])),
        memory_capacity_bytes=dict(
            zip(names, (int(b) for b in state.topology.memory_bytes))),
        ops_per_device=counts, costs=state.costs,
        links=topology_lib.link_source(state.topology))
    if state.measured is not None:
      report["measured"] = dict(state.measured)
    return report

  def save(self, path: Union[str, os.PathLike]) -> None:
    """Writes the placement file (atomically), for `load_placement`."""
    state = self._placed()
    placing.save(state.result, state.graph, os.fspath(path))

  def _placed(self) -> _Placed:
    if self._state is None:
      raise errors.InputError(
          f"{self.__name__} is not placed yet: call it once, or pass example "
          "arguments to gdp.place")
    return self._state

  def __repr__(self) -> str:
    where = (f"on {self._state.topology.name} by {self._state.result.method}"
             if self._state else "not placed yet")
    return f"<PlacedFunction {self.__name__} {where}>"


# ---- tracing, costing, judging --------------------------------------------------


def _as_tf_function(fn: Callable):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if isinstance(fn, tf.types.experimental.ConcreteFunction):
    raise errors.InputError(
        "pass the tf.function (or Python function), not a ConcreteFunction: "
        "calls are matched to its trace by their arguments")
  if isinstance(fn, tf.types.experimental.PolymorphicFunction):
    return fn
  return tf.function(fn)


def _trace_error(error: Exception) -> str:
  """One line for an error raised while tracing: autograph's "in user
  code:" report ends with the error and names the user's line before it."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  if len(lines) > 1 and lines[0] == "in user code:":
    where = [line for line in lines if line.startswith("File ")]
    return lines[-1] + (f" ({where[-1]})" if where else "")
  return f"{type(error).__name__}: {grappler_errors.first_line(error)}"


def _op_graph(extracted, topo: topology_lib.Topology, *, name: str,
              pin_captures: bool):
  """Costs the flat graph for the topology's hardware; returns it and its pins.

  When the placed step runs here it runs on the caller's variables, which
  stay on the device they live on: with `pin_captures` their ops are pinned
  there.
  """
  pins = {}
  if pin_captures:
    variables = extracted.resource_captures
    pins = {capture: device for capture, device in
            zip(extracted.capture_names, extracted.capture_devices)
            if device and capture in variables}
  return graph_specs.op_graph_from_extracted(
      extracted, name=name, devices=topo, pinned=pins), pins


def _reapply(graph, topo: topology_lib.Topology,
             loaded: placement_file.PlacementFile, compare: Sequence[str],
             seed: int) -> placing.PlaceResult:
  """A saved placement judged like a searched one, without any search."""
  indices = placement_file.apply(loaded, graph, topo)
  made = valid_result.valid_placement(graph, topo, indices, method=LOADED,
                                      seed=seed)
  details = {"loaded_from": loaded.path, "found_by": loaded.method}
  if made.repair is not None:
    details["repair"] = made.repair
  return placing.judge(graph, topo, LOADED, made.placement, details=details,
                       evaluations=made.evaluations, compare=compare,
                       seed=seed)


def _check_constraints(extracted, device_map: Mapping[str, str],
                       runs_here: bool) -> None:
  """PlacementError now, not at the first call, for a placement TF rejects."""
  from grappler_bridge import rewrite  # pylint: disable=g-import-not-at-top
  placed = rewrite.apply_placement(extracted.graph_def, device_map)
  if runs_here:
    rewrite.check_captures_stay(placed, extracted)


def _measure(state: _Placed, flat_args: list, runs_here: bool,
             allow_side_effects: bool) -> dict:
  """Times the chosen placement with the TF runtime on its devices."""
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  from tf_gdp.runtime import targets  # pylint: disable=g-import-not-at-top
  if runs_here:
    target = targets.LOCAL
  elif state.topology.name.startswith(topology_lib.CPU_WORKERS + ":"):
    # A subset of the workers (`cpu-workers:2[task:1/...]`) runs on the cluster.
    target = state.topology.name.partition("[")[0]
  else:
    raise errors.InputError(
        f"backend='measure' cannot reach the devices of {state.topology.name!r}"
        ": use local devices or cpu-workers:K")
  found = measure.measure(state.extracted, state.device_map, target,
                          example_args=flat_args,
                          allow_side_effects=allow_side_effects)
  return {"step_time_us": found.step_time_us, "valid": found.valid,
          "reason": found.reason, "target": found.target,
          "times_us": list(found.times_us)}


# ---- outputs -------------------------------------------------------------------


def _pack_outputs(structured, flat_outputs):
  """`fn`'s output structure with the placed run's tensors in it.

  The flat outputs are the tensors of `structured` in flattening order;
  leaves that are not tensors (None, Python numbers) were returned as-is.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  outputs = iter(flat_outputs)
  leaves = [next(outputs) if isinstance(leaf, tf.Tensor) else leaf
            for leaf in tf.nest.flatten(structured, expand_composites=True)]
  return tf.nest.pack_sequence_as(structured, leaves, expand_composites=True)


def _describe_inputs(concrete) -> str:
  args, kwargs = concrete.structured_input_signature
  return str(tuple(args) + ((kwargs,) if kwargs else ()))
