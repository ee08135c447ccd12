"""The baselines by name, and `run`: time a method and check what it returns.

Every method has the signature

    place(graph, topology, *, seed=0, **options) -> int32[num_nodes]

(device index per op). `run` times the search, counts the simulator calls
made through `common.simulate*`, checks the hard constraints (a baseline
that breaks one has a bug: `InternalError`), and simulates the placement
once more (not timed) to report its step time and any memory overflow:
estimates can be wrong, and an overflow must show in the tables, not vanish.
A list scheduler (m-ETF, m-SCT, HEFT) also returns the per-op order its own
schedule runs ops in (`MethodResult.priority`), so that it can be judged
both with the simulator's default order and as planned.
"""

import dataclasses
import importlib
import inspect
import logging
import time
import types
from typing import Optional

import numpy as np

from tf_gdp import errors
from tf_gdp.baselines import common
from tf_gdp.baselines import contiguous_dp
from tf_gdp.baselines import heft
from tf_gdp.baselines import local_search
from tf_gdp.baselines import m_etf
from tf_gdp.baselines import m_sct
from tf_gdp.baselines import m_topo
from tf_gdp.baselines import metis
from tf_gdp.baselines import random_placement
from tf_gdp.baselines import round_robin
from tf_gdp.baselines import side_offload
from tf_gdp.baselines import single_device
from tf_gdp.baselines import stage_pipeline
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph


@dataclasses.dataclass(frozen=True)
class MethodResult:
  """A method's placement and what finding it cost.

  Attributes:
    method: the method's name.
    placement: int32[num_nodes] device index per op.
    search_seconds: wall-clock time of the method call.
    evaluations: simulator calls the method made (counted ones).
    info: method notes plus `simulated_step_time_us`, `peak_memory_bytes`
      (per device), `memory_problems` (empty when everything fits), and with
      a plan `simulated_step_time_planned_us`.
    priority: float or int [num_nodes], the order the method's own schedule
      runs each device's ops in (lower first; `simulator.simulate`'s
      `priority`), or None for methods that plan no order.
  """
  method: str
  placement: np.ndarray
  search_seconds: float
  evaluations: int
  info: dict
  priority: Optional[np.ndarray] = None


class _LazyMethod:
  """A method whose module is imported on first call (it may be missing)."""

  def __init__(self, name: str, module: str, attribute: str, adapt=None):
    self.name = name
    self.module = module
    self.attribute = attribute
    self.adapt = adapt
    self.__doc__ = f"Calls {module}.{attribute} (imported on first use)."

  def target(self):
    try:
      function = getattr(importlib.import_module(self.module), self.attribute)
    except (ImportError, AttributeError) as e:
      raise errors.InputError(
          f"method {self.name!r} is not available: {self.module}."
          f"{self.attribute} cannot be imported ({e})") from e
    return self.adapt(function) if self.adapt else function

  def __call__(self, graph, topology, *, seed: int = 0, **options):
    return self.target()(graph, topology, seed=seed, **options)


def _without_seed(function):
  """Adapts `f(graph, topology)` to the method signature (seed unused)."""
  def method(graph, topology, *, seed: int = 0):
    del seed
    return function(graph, topology)
  return method


METHODS = types.MappingProxyType({
    "single_device": single_device.place,
    "random": random_placement.place,
    "round_robin": round_robin.place,
    "human_expert": _LazyMethod("human_expert", "tf_gdp.zoo.expert",
                                "expert_placement", _without_seed),
    "m_topo": m_topo.place,
    "m_etf": m_etf.place,
    "m_sct": m_sct.place,
    "heft": heft.place,
    "metis": metis.place,
    "stage_pipeline": stage_pipeline.place,
    "contiguous_dp": contiguous_dp.place,
    "side_offload": side_offload.place,
    "local_search": local_search.place,
    "hdp": _LazyMethod("hdp", "tf_gdp.baselines.hdp", "place"),
})


def method_names() -> list:
  return sorted(METHODS)


def get(name: str):
  """The method called `name`; InputError listing the known ones."""
  if name not in METHODS:
    raise errors.InputError(
        f"unknown placement method {name!r}; known: "
        f"{', '.join(method_names())}")
  return METHODS[name]


def run(name: str, graph: op_graph.OpGraph, topology: topology_lib.Topology,
        *, seed: int = 0, **options) -> MethodResult:
  """Places `graph` with method `name`, timed and checked (see module doc).

  Raises:
    InputError: unknown method or option, or no placement exists (e.g. the
      graph cannot fit in memory; the message says needed vs available).
    InternalError: the method broke a hard constraint (a bug).
  """
  method = get(name)
  function = method.target() if isinstance(method, _LazyMethod) else method
  _check_options(name, function, options)
  with common.recording() as record:
    start = time.perf_counter()
    placement = function(graph, topology, seed=seed, **options)
    seconds = time.perf_counter() - start
  placement = _checked(name, placement, graph, topology)
  result = simulator.simulate(graph, placement, topology)
  memory = simulator.memory_problems(result.peak_memory_bytes, topology)
  if memory:
    logging.warning("%s on %s: %s", name, graph.name, "; ".join(memory))
  info = dict(record.info)
  info.update(simulated_step_time_us=float(result.step_time_us),
              peak_memory_bytes=[int(b) for b in result.peak_memory_bytes],
              memory_problems=memory)
  priority = record.priority
  if priority is not None:
    priority = _checked_priority(name, priority, graph)
    info["simulated_step_time_planned_us"] = float(simulator.simulate(
        graph, placement, topology, priority=priority).step_time_us)
  return MethodResult(method=name, placement=placement,
                      search_seconds=seconds, evaluations=record.evaluations,
                      info=info, priority=priority)


def _check_options(name: str, function, options: dict) -> None:
  """InputError for an option the method does not take."""
  parameters = inspect.signature(function).parameters
  if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
    return
  known = [p for p, spec in parameters.items()
           if spec.kind is spec.KEYWORD_ONLY and p != "seed"]
  unknown = sorted(set(options) - set(known))
  if unknown:
    raise errors.InputError(
        f"method {name!r} has no option(s) {', '.join(unknown)}; its "
        f"options: {', '.join(known) or 'none'}")


def _checked_priority(name: str, priority, graph: op_graph.OpGraph):
  """The planned order as a copy; InternalError if it is not [num_nodes]."""
  array = np.array(priority)
  if array.shape != (graph.num_nodes,) or not np.issubdtype(array.dtype,
                                                             np.number):
    raise common.InternalError(
        f"method {name!r} planned an order of shape {array.shape} and dtype "
        f"{array.dtype}; expected numbers [{graph.num_nodes}]")
  return array


def _checked(name: str, placement, graph: op_graph.OpGraph,
             topology: topology_lib.Topology) -> np.ndarray:
  """int32[n] copy; InternalError if malformed or breaking a constraint."""
  array = np.asarray(placement)
  n, d = graph.num_nodes, topology.num_devices
  if (array.shape != (n,) or (array.size and (
      not np.issubdtype(array.dtype, np.integer) or array.min() < 0 or
      array.max() >= d))):
    raise common.InternalError(
        f"method {name!r} returned a placement of shape {array.shape} and "
        f"dtype {array.dtype}; expected int[{n}] in [0, {d})")
  array = array.astype(np.int32)
  problems = simulator.constraint_problems(graph, array, topology)
  if problems:
    raise common.InternalError(
        f"method {name!r} broke hard constraints (a baseline bug): "
        + "; ".join(problems))
  return array
