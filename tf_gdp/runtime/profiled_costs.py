"""Per-op costs of a graph profiled on the target itself, cached.

The roofline prices an op from its FLOPs and bytes; on a real target a small
op's time is mostly the runtime's own overhead, which the roofline does not
see, and fine splits are priced wrongly exactly where a placement search
looks for gains. So when the devices are here (this process's CPU devices,
`local-cpus:K`; the `cpu-workers:K` cluster of this machine) and the graph is
a TensorFlow graph, it is run on one device of the target for a few steps
with RunMetadata step stats (`measure.profile_op_times`), and each op is
priced by its median time. Ops the runtime did not report keep their
roofline cost; the returned info says how many of each.

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
from typing import Callable, Optional, Tuple

import numpy as np

from tf_gdp import errors
from tf_gdp import fileio
from tf_gdp import graph_specs
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import identity
from tf_gdp.graph import op_graph
from tf_gdp.runtime import targets

# The device kind a profile prices: every profiling target here is CPUs.
PROFILE_KIND = "CPU"
DEFAULT_REPEATS = 5


def target_for(devices: str) -> Optional[str]:
  """The runtime target that runs `devices` here, or None (not attached)."""
  name, _, _ = devices.partition(":")
  if name == topology_lib.LOCAL_CPUS:
    return targets.LOCAL
  if name == topology_lib.CPU_WORKERS:
    return devices
  return None


def cache_path(graph: op_graph.OpGraph, target: str) -> str:
  """Where the profile of `graph` on `target` is kept."""
  digest = hashlib.sha256(identity.graph_fingerprint(graph).encode())
  digest.update(np.ascontiguousarray(graph.output_bytes, np.int64).tobytes())
  digest.update(np.ascontiguousarray(graph.memory_bytes, np.int64).tobytes())
  digest.update(target.encode())
  root = os.path.dirname(topology_lib.calibrated_path(1))
  return os.path.join(root, "profiles", digest.hexdigest()[:32] + ".json")


def profiled_graph(loaded: graph_specs.LoadedGraph, devices: str,
                   topology: topology_lib.Topology, *,
                   repeats: int = DEFAULT_REPEATS, use_cache: bool = True,
                   log: Callable[[str], None] = lambda line: None
                   ) -> Tuple[op_graph.OpGraph, dict]:
  """`loaded`'s op graph priced by a profile on the target, and what priced it.

  Returns the graph unchanged (info `source: roofline` and why) when the
  devices are not attached here, the graph has no TensorFlow graph (op-graph
  JSON), or the graph does not run on the target; the reason is in the info.
  """
  target = target_for(devices)
  if target is None:
    return loaded.graph, {"source": "roofline",
                          "why": f"{devices} is not attached here"}
  if loaded.extracted is None:
    return loaded.graph, {"source": "as given",
                          "why": "an op-graph file has no TensorFlow graph "
                                 "to profile"}
  path = cache_path(loaded.graph, target)
  profile, cached = _read_cache(path) if use_cache else (None, False)
  if profile is None:
    log(f"  profiling {loaded.graph.name} on {target} ({repeats} steps)")
    started = time.perf_counter()
    from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
    try:
      profile = measure.profile_op_times(loaded.extracted, target,
                                         repeats=repeats)
    except RuntimeError as e:
      return loaded.graph, {"source": "roofline",
                            "why": errors.first_line(e)}
    _write_cache(path, profile, target, time.perf_counter() - started)
  speed = float(topology.devices[0].speed)
  graph = graph_specs.op_graph_from_extracted(
      loaded.extracted, name=loaded.graph.name, devices=topology,
      profile={name: us * speed for name, us in profile.items()},
      profile_kind=PROFILE_KIND,
      metadata={k: v for k, v in loaded.graph.metadata.items()
                if k in ("model", "knobs")})
  counts = graph.metadata.get("profile", {})
  return graph, {"source": "profiled", "target": target, "cached": cached,
                 "profiled_ops": int(counts.get("profiled_nodes", 0)),
                 "roofline_ops": int(counts.get("fallback_nodes",
                                                graph.num_nodes)),
                 "repeats": repeats}


def _read_cache(path: str):
  try:
    with open(path, encoding="utf-8") as f:
      document = json.load(f)
    times = document["op_times_us"]
    if isinstance(times, dict) and all(
        isinstance(v, (int, float)) for v in times.values()):
      return {str(k): float(v) for k, v in times.items()}, True
  except (OSError, ValueError, KeyError, TypeError):
    pass  # missing or unreadable: profile again
  return None, False


def _write_cache(path: str, profile: dict, target: str,
                 seconds: float) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fileio.write_atomically(path, json.dumps(
      {"target": target, "date": time.strftime("%Y-%m-%d %H:%M"),
       "seconds": round(seconds, 2), "op_times_us": profile}))
