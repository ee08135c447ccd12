"""Human-readable facts about an op graph: counts, totals, largest ops."""

from typing import Any

from tf_gdp.graph import op_graph


def summary(graph: op_graph.OpGraph, top: int = 0) -> dict[str, Any]:
  """Counts and totals that `inspect` prints, plus the `top` largest ops."""
  in_groups = sum(g is not None for g in graph.colocation_groups)
  return {
      "name": graph.name,
      "nodes": graph.num_nodes,
      "edges": graph.num_edges,
      "control_edges": int((graph.edge_output == op_graph.CONTROL_OUTPUT).sum()),
      "back_edges": int(graph.back_edges.shape[0]),
      "fetches": len(graph.fetches),
      "op_types": len(set(graph.op_types)),
      "total_cost_us": {k: graph.total_cost(k) for k in graph.kinds},
      "nodes_with_cost": {k: int((v > 0).sum()) for k, v in graph.costs.items()},
      "persistent_bytes": int(graph.memory_bytes.sum()),
      "output_bytes": int(graph.output_bytes.sum()),
      "edge_bytes": int(graph.edge_bytes.sum()),
      "colocation_groups": len({g for g in graph.colocation_groups
                                if g is not None}),
      "nodes_in_groups": in_groups,
      "kind_restricted_nodes": sum(k is not None for k in graph.device_kinds),
      "pinned_nodes": sum(d is not None for d in graph.pinned_devices),
      "largest_ops": largest_ops(graph, top),
  }


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
