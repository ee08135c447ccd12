"""Per-op costs of a graph profiled on the target itself, cached.

The roofline prices an op from its FLOPs and bytes; on a real target a small
op's time is mostly the runtime's own overhead, which the roofline does not
see, and fine splits are priced wrongly exactly where a placement search
looks for gains. So when the devices are here (this process's CPU devices,
`local-cpus:K` or `local-gpus:K`; the `cpu-workers:K` cluster of this
machine) and the graph is a TensorFlow graph, it is run on the first device
of the target for a few steps
with RunMetadata step stats (`measure.profile`), and each op is priced by
its median time plus its share of the executor's own time between ops (the
untraced step less the traced ops, `executor_gap_us`). Ops the runtime did
not report keep their roofline cost; the returned info says how many of
each.

A profile is measured on one device with the topology's speed factor already
in it, so its times are stored multiplied by that device's speed: the
simulator divides by the speed again and charges the op what was measured.

Profiles are cached under `$TF_GDP_HOME/profiles/` by the graph (ops, edges,
tensor sizes) and the target, so placing the same graph again is free.
"""

import hashlib
import json
import os
import time
from typing import Callable, Mapping, Optional, Tuple

import numpy as np

from grappler_bridge import errors as bridge_errors
from grappler_bridge import side_effects

from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity
from tf_gdp.graph import op_graph
from tf_gdp.runtime import targets

DEFAULT_REPEATS = 5
_LOCAL_GPUS = "local-gpus"


def target_for(topology: topology_lib.Topology) -> Optional[str]:
  """The runtime target that runs `topology`'s devices here, or None.

  This process's devices (`local-cpus:K`, `local-gpus:K`, or a list of them)
  and this machine's `cpu-workers:K` cluster; presets of other machines are
  not here.
  """
  name = topology.name.partition("[")[0]
  kind = name.partition(":")[0]
  if kind in (topology_lib.LOCAL_CPUS, _LOCAL_GPUS):
    return targets.LOCAL
  if kind == topology_lib.CPU_WORKERS:
    return name
  return None


def cache_path(graph: op_graph.OpGraph, target: str) -> str:
  """Where the profile of `graph` on `target` is kept."""
  digest = hashlib.sha256(identity.graph_fingerprint(graph).encode())
  digest.update(np.ascontiguousarray(graph.output_bytes, np.int64).tobytes())
  digest.update(np.ascontiguousarray(graph.memory_bytes, np.int64).tobytes())
  digest.update(target.encode())
  root = os.path.dirname(topology_lib.calibrated_path(1))
  return os.path.join(root, "profiles", digest.hexdigest()[:32] + ".json")


def profiled_graph(graph: op_graph.OpGraph, extracted,
                   topology: topology_lib.Topology, *,
                   pinned: Optional[Mapping[str, str]] = None,
                   repeats: int = DEFAULT_REPEATS, use_cache: bool = True,
                   allow_side_effects: bool = False,
                   log: Callable[[str], None] = lambda line: None
                   ) -> Tuple[op_graph.OpGraph, dict]:
  """`graph` priced by a profile on `topology`'s target, and what priced it.

  `extracted` is its flat TensorFlow graph (None for an op-graph file) and
  `pinned` the pins it was costed with. The profile runs every op on the
  topology's first device and prices that device's kind. Returns `graph`
  unchanged, with the reason in the info, when the devices are not here,
  there is no TensorFlow graph, the graph has ops that reach outside the
  step (file writes, Python callbacks; profiled only with
  `allow_side_effects`), or it does not run on the target.
  """
  target = target_for(topology)
  if target is None:
    return graph, {"source": "roofline",
                   "why": f"{topology.name} is not attached here"}
  if extracted is None:
    return graph, {"source": "as given",
                   "why": "an op-graph file has no TensorFlow graph to "
                          "profile"}
  first = topology.devices[0]
  path = cache_path(graph, f"{target}:{first.name}")
  found, cached = _read_cache(path) if use_cache else (None, False)
  if found is None:
    outside = side_effects.find(extracted.graph_def)
    if outside and not allow_side_effects:
      return graph, {"source": "roofline",
                     "why": f"not profiled: it has ops that reach outside the "
                            f"step ({', '.join(op for _, op in outside[:3])});"
                            " --allow_side_effects profiles it"}
    log(f"  profiling {graph.name} on {target} ({repeats} steps)")
    started = time.perf_counter()
    from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
    try:
      found = measure.profile(
          extracted, target, repeats=repeats,
          device=first.name if target == targets.LOCAL else None,
          allow_side_effects=allow_side_effects)
    except RuntimeError as e:
      return graph, {"source": "roofline", "why": bridge_errors.first_line(e)}
    found = (found.op_times_us, found.step_time_us)
    _write_cache(path, found, target, time.perf_counter() - started)
  op_times, step_time = found
  gap_us = executor_gap_us(op_times, step_time,
                           topology.runtime.step_overhead_us[0])
  scale = (1.0 if target == targets.LOCAL else traced_scale(
      op_times, step_time, topology.runtime.step_overhead_us[0]))
  profiled = graph_specs.op_graph_from_extracted(
      extracted, name=graph.name, devices=topology, pinned=pinned,
      profile={name: (us * scale + gap_us) * float(first.speed)
               for name, us in op_times.items()},
      profile_kind=first.kind,
      metadata={k: v for k, v in graph.metadata.items()
                if k in ("model", "knobs")})
  graph = profiled
  counts = graph.metadata.get("profile", {})
  return graph, {"source": "profiled", "target": target, "cached": cached,
                 "profiled_ops": int(counts.get("profiled_nodes", 0)),
                 "roofline_ops": int(counts.get("fallback_nodes",
                                                graph.num_nodes)),
                 "executor_gap_us": gap_us, "trace_scale": scale,
                 "repeats": repeats}


def executor_gap_us(op_times_us: Mapping[str, float], step_time_us: float,
                    step_overhead_us: float = 0.0) -> float:
  """The executor's own time per op: what the step takes beyond its ops.

  Traced op times cover each kernel; between kernels the executor
  schedules, and on a one-thread worker that time is part of the step. The
  untraced step's time, less the step's fixed cost and the ops' sum, spread
  over the ops, is added to each profiled op's cost. Zero when ops overlap
  (several threads or streams: the sum then exceeds the step).
  """
  if not op_times_us:
    return 0.0
  spare = step_time_us - step_overhead_us - sum(op_times_us.values())
  return max(0.0, spare / len(op_times_us))


def traced_scale(op_times_us: Mapping[str, float], step_time_us: float,
                 step_overhead_us: float = 0.0) -> float:
  """The factor that brings traced op times within the untraced step.

  On a one-thread worker (cpu-workers) the ops run one at a time, so their
  times cannot add up to more than the untraced step less its fixed cost;
  when they do, tracing itself took the difference (it costs each execution
  of an op, and a loop's ops execute once per iteration), and every op's
  time is scaled down by the same factor. 1 when they fit.
  """
  total = sum(op_times_us.values())
  room = step_time_us - step_overhead_us
  if total <= 0.0 or room <= 0.0 or total <= room:
    return 1.0
  return room / total


def _read_cache(path: str):
  """((op times, step time), True) from the cache, or (None, False)."""
  try:
    with open(path, encoding="utf-8") as f:
      document = json.load(f)
    times, step = document["op_times_us"], float(document["step_time_us"])
    if isinstance(times, dict) and all(
        isinstance(v, (int, float)) for v in times.values()):
      return ({str(k): float(v) for k, v in times.items()}, step), True
  except (OSError, ValueError, KeyError, TypeError):
    pass  # missing, unreadable or from before step times: profile again
  return None, False


def _write_cache(path: str, found, target: str, seconds: float) -> None:
  op_times, step_time = found
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fileio.write_atomically(path, json.dumps(
      {"target": target, "date": time.strftime("%Y-%m-%d %H:%M"),
       "seconds": round(seconds, 2), "step_time_us": step_time,
       "op_times_us": op_times}))
