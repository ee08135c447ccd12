"""Memory-tight graphs: every method's result is valid, or a clear error.

The default graphs are zoo models at sizes no single GPU of `p100x4` holds
(the host CPU's 256 GiB does, slowly): GNMT-8 at batch 512 (18.7 GiB on one
GPU), Transformer-XL 8 at batch 64 (22.6 GiB), and GNMT-8 at batch 1536
(49.7 GiB, more than three GPUs have). Every classic baseline runs through
the benchmark harness; `gdp` (zero-shot) and `auto` run through
`placing.place`, as `tf-gdp place` runs them. For each method the table
gives whether its own placement fitted, and the result after the validity
gate (`baselines.valid_result`): the step time, the groups the repair
moved, and the ratio to the best result. The summary gives, per graph, the
share of methods whose own placement fitted and the share of valid results.

Example:
  python -m tf_gdp.bench.memory_tight_check --json_out=memory_tight.json
"""

import time

from absl import app
from absl import flags

from tf_gdp import errors
from tf_gdp import graph_specs
from tf_gdp import placing
from tf_gdp.bench import harness
from tf_gdp.cost import topology as topology_lib

DEFAULT_GRAPHS = "gnmt8:batch=512,transformer_xl8:batch=64,gnmt8:batch=1536"

def check_graph(loaded, label: str, devices: str, *, samples: int, seed: int,
                log=harness.stderr_progress) -> list:
  """One row per method: own validity, result validity, step time."""
  rows = []
  for r in harness.bench_graph(loaded, label, devices,
                               harness.CLASSIC_METHODS, seed=seed,
                               progress=log):
    rows.append({"method": r.method, "own_valid": r.own_valid and r.valid,
                 "valid": r.valid, "step_time_us": _finite(r.step_time_us),
                 "own_reason": r.own_reason, "reason": r.reason,
                 "fallback": r.repaired_by,
                 "search_seconds": _finite(r.search_seconds)})
  for method in (placing.GDP, placing.AUTO):
    clock = time.perf_counter()
    try:
      result = placing.place(loaded.graph, topology_lib.get(devices), method,
                             samples=samples, seed=seed, compare=(),
                             extracted=loaded.extracted, robust_members=0)
    except errors.InputError as e:
      rows.append({"method": method, "own_valid": False, "valid": False,
                   "step_time_us": None, "reason": str(e),
                   "search_seconds": time.perf_counter() - clock})
      continue
    repair = result.details.get("repair")
    # gdp's own placements are its greedy one and its samples: the repair
    # may have changed some before one was chosen.
    repaired_shots = result.details.get("zero_shot_repaired") or 0
    row = {"method": method,
           "own_valid": repair is None and not repaired_shots,
           "valid": result.valid, "step_time_us": result.step_time_us,
           "own_reason": repair and repair["original_reason"],
           "reason": result.reason, "search_seconds": result.search_seconds,
           "evaluations": result.evaluations,
           "moved_groups": repair and repair["moved_groups"],
           "fallback": repair and repair.get("fallback")}
    if method == placing.GDP:
      row["zero_shot_repaired"] = repaired_shots
      row["zero_shot_placements"] = samples + 1
      if repaired_shots and not repair:
        row["own_reason"] = (f"{repaired_shots} of {samples + 1} zero-shot "
                             "placements did not fit")
    else:
      row["winner"] = result.details["winner"]
    rows.append(row)
    log(f"  {label} / {method}: {result.step_time_us / 1e3:,.1f} ms "
        f"({'repaired' if repair else 'as found'}, "
        f"{result.search_seconds:.0f} s)")
  best = min((r["step_time_us"] for r in rows if r["valid"]), default=None)
  for r in rows:
    r["ratio_to_best"] = (r["step_time_us"] / best if r["valid"] and best
                          else None)
  return rows


def _finite(value):
  return None if value is None or value != value else float(value)


def format_table(label: str, rows: list) -> str:
  lines = [f"{label}", f"  {'method':<16}{'own fits':>9}{'result':>8}"
           f"{'step ms':>12}{'/best':>7}  note"]
  for r in rows:
    step = "-" if r["step_time_us"] is None else f"{r['step_time_us'] / 1e3:,.1f}"
    ratio = "-" if r["ratio_to_best"] is None else f"{r['ratio_to_best']:.2f}"
    fallback = f" (by {r['fallback']})" if r.get("fallback") else ""
    note = (r.get("reason") if not r["valid"] else
            f"repaired{fallback}: {r['own_reason']}" if not r["own_valid"] else
            f"winner {r['winner']}" if r.get("winner") else "")
    lines.append(f"  {r['method']:<16}{'yes' if r['own_valid'] else 'NO':>9}"
                 f"{'valid' if r['valid'] else 'NONE':>8}{step:>12}{ratio:>7}"
                 f"  {(note or '')[:90]}")
  own = sum(r["own_valid"] for r in rows)
  valid = sum(r["valid"] for r in rows)
  lines.append(f"  own placements that fit: {own}/{len(rows)}; valid results: "
               f"{valid}/{len(rows)}")
  return "\n".join(lines)


def main(argv):
  del argv
  started = time.time()
  results = []
  try:
    items = graph_specs.parse(_GRAPHS.value)
    topology_lib.get(_DEVICES.value)
  except errors.InputError as e:
    raise app.UsageError(str(e)) from e
  for item in items:
    loaded = item.load(_DEVICES.value)
    rows = check_graph(loaded, item.label, _DEVICES.value,
                       samples=_SAMPLES.value, seed=_SEED.value)
    results.append({"graph": item.label, "nodes": loaded.graph.num_nodes,
                    "devices": _DEVICES.value, "rows": rows})
    print(format_table(item.label, rows), flush=True)
  harness.finish_run("memory_tight_check", results, started, _JSON_OUT.value)


if __name__ == "__main__":
  # Flags only here, so other modules may import this one's functions.
  _GRAPHS = flags.DEFINE_string("graphs", DEFAULT_GRAPHS, "Graph spec.")
  _DEVICES = flags.DEFINE_string("devices", "p100x4", "Topology.")
  _SAMPLES = flags.DEFINE_integer("samples", 16, "gdp: sampled placements.")
  _SEED = flags.DEFINE_integer("seed", 0, "Seeds sampling and random methods.")
  _JSON_OUT = flags.DEFINE_string("json_out", None, "Write the rows here.")
  app.run(main)
