"""Measured confirmation: the best candidates and one device, timed, interleaved.

The simulator ranks coarse placements well and fine splits badly, and a fine
split is what a search tends to return. So before a placement for devices
that are here is handed to the user, the few best candidates by prediction
and the single-device placement are run on the target, round after round in
a rotating order (so that drifting machine load hits each alike), and the
winner is the best measured median. A placement that measures slower than
one device is never the result: one device is a candidate, and another
candidate wins only when it is faster than one device in every round (the
two measured side by side, minutes apart at most) and by more than
`TIE_MARGIN` in the median; anything less is inside the noise of a shared
machine, where one placement's rounds differ by 10-15%. Candidates with the
very same placement are measured once (one device's name first), so noise
never picks one name of a placement over another.

Only targets with real parallel devices are measured: `cpu-workers:K`
clusters and this process's GPUs. This process's logical CPU devices
(`local-cpus:K`) share one thread pool, so their times say nothing about a
placement's speed; there the result is the prediction, and the report says
so.
"""

import contextlib
import dataclasses
import statistics
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from tf_gdp.cost import topology as topology_lib

DEFAULT_ROUNDS = 3
DEFAULT_REPEATS = 3
# A split that beats one device by less than this measures inside the noise
# of a shared machine (docs/BENCHMARKS.md, "Real runtime"): one device wins.
TIE_MARGIN = 0.05
PREDICTED_ONLY = ("predicted only: logical CPU devices of one process share its "
                  "thread pool, so their measured times do not tell placements "
                  "apart")


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One placement to measure: its name (the method) and prediction."""
  name: str
  placement: np.ndarray
  predicted_us: float


@dataclasses.dataclass
class Confirmation:
  """What was measured and which candidate won."""
  target: str
  chosen: str
  rows: List[dict]  # name, predicted_us, measured_us, round_us, valid, reason
  rounds: int

  def report(self) -> dict:
    return dataclasses.asdict(self)


def target_for(topology: topology_lib.Topology) -> Optional[str]:
  """The target whose measurements can rank placements on `topology`."""
  name = topology.name.partition("[")[0]
  if name.startswith(topology_lib.CPU_WORKERS + ":"):
    return name
  if name.startswith("local-gpus:"):
    return "local"
  return None


def confirm(extracted, candidates: Sequence[Candidate], target: str, *,
            topology: topology_lib.Topology, rounds: int = DEFAULT_ROUNDS,
            repeats: int = DEFAULT_REPEATS, allow_side_effects: bool = False,
            log: Callable[[str], None] = lambda line: None) -> Confirmation:
  """Measures every candidate `rounds` times, interleaved; the best wins.

  `candidates` must include the single-device placement under the name
  `single_device`; a candidate that fails to run (OOM, kernel error) is
  never chosen, and another candidate wins only when it clearly beats one
  device (`_winner`). Each candidate's figure is the median of its rounds'
  medians (`repeats` timed steps each after one warm-up step); rows of
  candidates with another's placement name it in `same_as`.
  """
  from tf_gdp.runtime import measure  # pylint: disable=g-import-not-at-top
  names = [c.name for c in candidates]
  if "single_device" not in names:
    raise ValueError("confirmation needs the single_device candidate")
  twin = _twins(candidates)
  timed = [c for c in candidates if twin[c.name] == c.name]
  runs = {c.name: [] for c in timed}
  reasons = {}
  with _opened(target) as opened:
    for round_index in range(rounds):
      shift = round_index % len(timed)
      for candidate in list(timed[shift:]) + list(timed[:shift]):
        found = measure.measure(extracted, candidate.placement, opened,
                                topology=topology, warmup=1, repeats=repeats,
                                allow_side_effects=allow_side_effects)
        if found.valid:
          runs[candidate.name].append(found.step_time_us)
        else:
          reasons[candidate.name] = found.reason
      log(f"  measured round {round_index + 1}/{rounds}: " + ", ".join(
          f"{n} {runs[n][-1] / 1e3:.1f} ms" for n in runs
          if runs[n] and n not in reasons))
  rows = []
  for candidate in candidates:
    source = twin[candidate.name]
    times = runs[source]
    ok = bool(times) and source not in reasons
    rows.append({"name": candidate.name,
                 "predicted_us": float(candidate.predicted_us),
                 "measured_us": float(statistics.median(times)) if ok else None,
                 "round_us": [float(t) for t in times], "valid": ok,
                 "reason": reasons.get(source),
                 "same_as": None if source == candidate.name else source})
  return Confirmation(target=str(target), chosen=_winner(rows), rows=rows,
                      rounds=rounds)


def same_placements(placements: Mapping[str, Any],
                    first: Optional[str] = None) -> Dict[str, str]:
  """Name -> the name of the first entry with the very same placement.

  In the mapping's order, with `first` (when given) before every other
  name: one placement under several names is then measured once, under
  that name.
  """
  ordered = sorted(placements, key=lambda name: name != first)
  seen = {}
  for name in ordered:
    seen.setdefault(np.asarray(placements[name], np.int64).tobytes(), name)
  return {name: seen[np.asarray(placements[name], np.int64).tobytes()]
          for name in placements}


def _twins(candidates: Sequence[Candidate]) -> Dict[str, str]:
  """Name -> the candidate measured for it (one device's name first)."""
  return same_placements({c.name: c.placement for c in candidates},
                         first="single_device")


def _winner(rows: List[dict]) -> str:
  """The fastest candidate that clearly beats one device, else one device.

  Clearly: faster in every round, side by side, and by more than
  `TIE_MARGIN` in the median. Without a valid one-device figure, the best
  valid median.
  """
  single = next(r for r in rows if r["name"] == "single_device")
  valid = [r for r in rows if r["valid"] and r["same_as"] is None]
  if not single["valid"]:
    return (min(valid, key=lambda r: r["measured_us"])["name"] if valid
            else "single_device")

  def clearly_faster(row) -> bool:
    return (row["measured_us"] < single["measured_us"] * (1.0 - TIE_MARGIN)
            and len(row["round_us"]) == len(single["round_us"])
            and all(mine < theirs for mine, theirs in
                    zip(row["round_us"], single["round_us"])))

  winners = [r for r in valid
             if r["name"] != "single_device" and clearly_faster(r)]
  return (min(winners, key=lambda r: r["measured_us"])["name"] if winners
          else "single_device")


@contextlib.contextmanager
def _opened(target: str):
  """A started cluster for `cpu-workers:K` (one for every run), else `target`."""
  if not target.startswith(topology_lib.CPU_WORKERS + ":"):
    yield target
    return
  from tf_gdp.runtime import workers  # pylint: disable=g-import-not-at-top
  with workers.CpuWorkerCluster(int(target.partition(":")[2])) as cluster:
    yield cluster
