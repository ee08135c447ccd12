"""`tf-gdp inspect`: counts, total compute, memory and constraints of a graph.

Example:
  tf-gdp inspect --graph=/tmp/i.json --top=10
"""

import json

from absl import flags

from tf_gdp.cost import presets
from tf_gdp.graph import op_graph
from tf_gdp.graph import sources

_GRAPH = flags.DEFINE_string(
    "graph", None, "Op-graph .json, GraphDef/MetaGraphDef (.pb/.pbtxt) or "
    "SavedModel directory.", required=True)
_DEVICES = flags.DEFINE_string(
    "devices", presets.DEFAULT, "Device preset that prices a TF graph's ops "
    "(ignored for .json, which carries its costs).")
_TOP = flags.DEFINE_integer("top", 10, "How many of the largest ops to list.",
                            lower_bound=0)
_AS_JSON = flags.DEFINE_bool("json", False, "Print the summary as JSON.")


def main(argv):
  del argv
  graph = sources.load(_GRAPH.value, devices=_DEVICES.value).graph
  info = op_graph.summary(graph)
  info["largest_ops"] = largest_ops(graph, _TOP.value)
  if _AS_JSON.value:
    print(json.dumps(info, indent=2))
    return
  print(format_summary(info))


def largest_ops(graph: op_graph.OpGraph, count: int) -> list:
  """The `count` costliest ops by their most expensive kind's cost."""
  kind = "GPU" if "GPU" in graph.costs else graph.kinds[0]
  order = graph.costs[kind].argsort()[::-1][:count]
  return [{"name": graph.node_names[i], "op": graph.op_types[i],
           "cost_us": {k: float(v[i]) for k, v in graph.costs.items()},
           "output_bytes": int(graph.output_bytes[i])} for i in order]


def format_summary(info: dict) -> str:
  lines = [f"graph {info['name']}"]
  for key in ("nodes", "edges", "control_edges", "back_edges", "fetches",
              "op_types", "colocation_groups", "nodes_in_groups",
              "kind_restricted_nodes", "pinned_nodes"):
    lines.append(f"  {key:<22} {info[key]:>14,}")
  for key in ("persistent_bytes", "output_bytes", "edge_bytes"):
    lines.append(f"  {key:<22} {info[key] / 2**20:>14,.1f} MiB")
  for kind, total in info["total_cost_us"].items():
    with_cost = info["nodes_with_cost"][kind]
    lines.append(f"  total {kind} compute    {total / 1000:>14,.3f} ms "
                 f"({with_cost:,} ops with cost > 0)")
  if info["largest_ops"]:
    lines.append("  largest ops:")
    for op in info["largest_ops"]:
      costs = ", ".join(f"{k} {v:,.1f} us" for k, v in op["cost_us"].items())
      lines.append(f"    {op['name'][:60]:<60} {op['op']:<24} {costs}")
  return "\n".join(lines)
