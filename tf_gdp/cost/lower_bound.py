"""A communication-free lower bound on the step time of any placement.

Every benchmark reports its step times as a ratio to this bound, so the
bound must never exceed a step time the simulator can produce; it is the
larger of two terms.

Setting: a placement puts op i on a device p(i) whose kind the op allows
(`graph.device_kinds`); the simulator runs it for t_i = C_k(i) / s_p(i),
where k is the device's kind, C_k the graph's cost column for that kind and
s the device's speed. T is the step time.

1. Critical path. Along any path of the DAG an op starts no earlier than its
   predecessor ends (a transfer or a control signal only adds time), so T is
   at least the longest path where each op takes its fastest time over the
   devices it may use, best_i = min over allowed devices j of C_k(j)(i) / s_j.

2. Work. A device runs one op at a time, so its busy time L_j <= T. Let S_k
   be the total speed of the topology's devices of kind k and take any
   weights u_k >= 0 with sum_k u_k S_k = 1. Then
     T = sum_j u_k(j) s_j T >= sum_j u_k(j) s_j L_j
       = sum_i u_k(p(i)) s_p(i) t_i = sum_i u_k(p(i)) C_k(p(i))(i)
       >= sum_i min over allowed kinds k of u_k C_k(i)   =: W(u).
   With u_k = 1 / (total speed) this is "total work / total speed", each op's
   work being its cheapest allowed kind's cost. With heterogeneous kinds
   (4 GPUs and a CPU 10-30x slower) that is weak, so we maximise W over u.
   W is concave and its maximum is, by LP duality, the makespan of the best
   *fractional* assignment of ops to device kinds. With two kinds (GPU + CPU,
   every preset) a golden-section line search finds it; with more, an LP
   solve (scipy, if installed) and pairwise line searches. W is always
   evaluated here at a feasible u, so the result is a valid bound whatever
   the search does; the search only decides how tight it is.

An op that allows no kind present in the topology (no valid placement
exists) is treated as allowed everywhere, so the bound stays finite and
still holds for every placement that respects the kinds wherever it can.
The bound ignores memory, pins and colocation (they only restrict placements
further), and transfers (they only add time).
"""

import numpy as np

from tf_gdp.cost import compiled
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
_LINE_SEARCH_STEPS = 60
_MAX_ROUNDS = 20


def lower_bound(graph: op_graph.OpGraph,
                topology: topology_lib.Topology) -> float:
  """max(critical path, work bound) in microseconds; see the module doc."""
  critical_path, work = bound_terms(graph, topology)
  return max(critical_path, work)


def bound_terms(graph: op_graph.OpGraph,
                topology: topology_lib.Topology) -> tuple:
  """(critical path us, work us): the two terms of `lower_bound`."""
  if graph.num_nodes == 0:
    return 0.0, 0.0
  plan = simulator.prepare(graph)
  tables = simulator.device_tables(graph, topology)
  allowed = tables.kind_ok.copy()
  allowed[~allowed.any(axis=1)] = True
  best = np.where(allowed, tables.duration_us, np.inf).min(axis=1)
  critical_path = float(_longest_path(plan.order, plan.in_ptr, plan.in_edges,
                                      plan.edge_src, best))
  return critical_path, _work_bound(*_kind_tables(tables, allowed, topology))


@compiled.jit
def _longest_path(order, in_ptr, in_edges, edge_src, weight):
  """Heaviest path through the DAG with node weights `weight`."""
  finish = np.zeros(order.shape[0], np.float64)
  longest = 0.0
  for v in order:
    start = 0.0
    for k in range(in_ptr[v], in_ptr[v + 1]):
      start = max(start, finish[edge_src[in_edges[k]]])
    finish[v] = start + weight[v]
    longest = max(longest, finish[v])
  return longest


def _kind_tables(tables: simulator.DeviceTables, allowed: np.ndarray,
                 topology: topology_lib.Topology) -> tuple:
  """(a float[n, K], S float[K]) over the topology's kinds.

  a[i, k] = C_k(i) / S_k (inf where op i may not use kind k): the time op i
  would take if all devices of kind k shared it. C_k(i) is recovered as the
  min over the kind's devices of duration * speed (equal up to rounding; the
  min keeps the bound on the safe side).
  """
  speeds = topology.speeds
  columns, kind_speed = [], []
  for kind in sorted(set(topology.kinds)):
    devices = [j for j, k in enumerate(topology.kinds) if k == kind]
    cost = (tables.duration_us[:, devices] * speeds[devices]).min(axis=1)
    ok = allowed[:, devices].any(axis=1)
    kind_speed.append(speeds[devices].sum())
    columns.append(np.where(ok, cost / kind_speed[-1], np.inf))
  return np.stack(columns, axis=1), np.asarray(kind_speed)


def _work_bound(a: np.ndarray, kind_speed: np.ndarray) -> float:
  """max over the simplex of W(v) = sum_i min_k v_k a[i, k], v_k = u_k S_k.

  Starts at u_k = 1 / total speed (v_k = S_k / total speed): total work /
  total speed. With two kinds one line search finds the maximum. With three
  or more, pairwise line searches can stall at a kink, so the LP is solved
  (scipy's HiGHS, when installed) and its v re-evaluated here: the value
  returned is always W at a feasible v, whatever the solver's accuracy.
  """
  num_kinds = a.shape[1]
  shares = kind_speed / kind_speed.sum()
  value = _weighted_min_sum(a, shares)
  if num_kinds > 2:
    solved = _solve_dual(a)
    if solved is not None and _weighted_min_sum(a, solved) > value:
      shares, value = solved, _weighted_min_sum(a, solved)
  for _ in range(_MAX_ROUNDS if num_kinds > 1 else 0):
    before = value
    for p in range(num_kinds):
      for q in range(p + 1, num_kinds):
        shares, value = _line_search(a, shares, value, p, q)
    if value <= before * (1 + 1e-12):
      break
  return float(value)


def _solve_dual(a: np.ndarray):
  """argmax_v W(v) as an LP (v, z): max sum z_i, z_i <= v_k a[i, k]; or None.

  None when scipy is missing or the solver fails: callers then keep the
  (valid, maybe looser) line-search result.
  """
  try:
    from scipy import optimize  # pylint: disable=g-import-not-at-top
    from scipy import sparse  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  n, num_kinds = a.shape
  rows, kinds = np.nonzero(np.isfinite(a))
  count = rows.shape[0]
  # Variables: v[0:K], z[K:K+n]. Constraint r: z_i - a[i, k] v_k <= 0.
  values = np.concatenate([np.ones(count), -a[rows, kinds]])
  columns = np.concatenate([num_kinds + rows, kinds])
  matrix = sparse.csr_matrix(
      (values, (np.tile(np.arange(count), 2), columns)),
      shape=(count, num_kinds + n))
  objective = np.concatenate([np.zeros(num_kinds), -np.ones(n)])
  result = optimize.linprog(
      objective, A_ub=matrix, b_ub=np.zeros(count),
      A_eq=np.concatenate([np.ones(num_kinds), np.zeros(n)])[None, :],
      b_eq=[1.0], bounds=[(0, None)] * num_kinds + [(None, None)] * n,
      method="highs")
  if result.status != 0:
    return None
  shares = np.clip(result.x[:num_kinds], 0.0, None)
  return shares / shares.sum() if shares.sum() > 0 else None


def _weighted_min_sum(a: np.ndarray, shares: np.ndarray) -> float:
  """W(v) = sum_i min_k v_k a[i, k], where a = inf marks a disallowed kind."""
  scaled = np.full_like(a, np.inf)
  np.multiply(a, shares[None, :], out=scaled, where=np.isfinite(a))
  return float(scaled.min(axis=1).sum())


def _line_search(a, shares, value, p, q):
  """Best W moving share between kinds p and q (others fixed); never worse."""
  pooled = shares[p] + shares[q]
  if pooled <= 0:
    return shares, value

  def at(fraction):
    trial = shares.copy()
    trial[p], trial[q] = fraction * pooled, (1.0 - fraction) * pooled
    return trial, _weighted_min_sum(a, trial)

  lo, hi = 0.0, 1.0
  x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
  f1, f2 = at(x1)[1], at(x2)[1]
  for _ in range(_LINE_SEARCH_STEPS):
    if f1 < f2:
      lo, x1, f1 = x1, x2, f2
      x2 = lo + _GOLDEN * (hi - lo)
      f2 = at(x2)[1]
    else:
      hi, x2, f2 = x2, x1, f1
      x1 = hi - _GOLDEN * (hi - lo)
      f1 = at(x1)[1]
  trial, trial_value = at((lo + hi) / 2)
  if trial_value > value:
    return trial, trial_value
  return shares, value
