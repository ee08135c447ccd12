"""m-SCT: Baechi's memory-constrained Small Communication Time placement.

Jeon et al., "Baechi: Fast Device Placement of Machine Learning Graphs"
(SoCC 2020), built on Hanen and Munier, "An approximation
algorithm for scheduling dependent tasks on m processors with small
communication delays" (Discrete Applied Mathematics, 2001; ETFA 1995).

The SCT idea: when communication is small next to computation, a good
schedule keeps, for each op, at most one successor (its *favorite child*) on
its own device right after it, and pays communication on the other edges.
Favorite children come from the LP relaxation of that choice:

    minimise   w
    subject to s_v >= s_u + p_u + c_uv * x_uv    for every edge (u, v)
               w   >= s_v + p_v                   for every op v
               sum over children v of u of x_uv >= outdeg(u) - 1
               sum over parents u of v of x_uv  >= indeg(v) - 1
               0 <= x_uv <= 1,  s >= 0,

x_uv = 0 meaning "v is u's favorite child" (no communication); rounding
x_uv < 1/2 gives at most one favorite child per op and at most one favorite
parent per op. p is an op's mean time on its candidate devices, c the mean
transfer time over pairs of primary devices (0 inside a colocation group,
which never splits). Parallel edges between two ops share one x. The LP is
solved with scipy's HiGHS. Then m-ETF (`list_scheduler`) runs with the
favorite rule: a favorite child ready when its parent's device frees up is
scheduled there next (the device is reserved for it); one that is not
ready then is an ordinary op.

Size (60k-op graphs, an LP of ~250k variables): the LP is solved in a
rolling horizon over the topological order instead of at once: windows of
`lp_window` ops (default 1000), each an LP over its ops' start times and
the x of the edges entering them; earlier ops enter as constants (their LP
start times), and an op that already got a favorite child in an earlier
window has no favorite budget left. Each window also adds a small term for
earlier average start (so x is meaningful off the critical path, where the
makespan alone does not care) and a tiny reward for x = 1 (so an edge is a
favorite only where it buys time, not by accident). This replaces
coarsening (contracting chains and groups until the LP is small): windows
keep the LP at op level, and the total cost grows linearly (GNMT-8, 60k
ops: 60 windows of ~3k variables, a few seconds). With one primary device
there is nothing to choose and m-SCT is m-ETF.
"""

import numpy as np

from tf_gdp.baselines import common
from tf_gdp.baselines import communication
from tf_gdp.baselines import list_scheduler
from tf_gdp.cost import simulator
from tf_gdp.cost import topology as topology_lib
from tf_gdp.graph import op_graph

_START_WEIGHT = 0.1  # objective weight of the window's mean start time
_NOT_FAVORITE_REWARD = 1e-6  # per unit of x, breaks ties towards x = 1


def place(graph: op_graph.OpGraph, topology: topology_lib.Topology, *,
          seed: int = 0, lp_window: int = 1000, link_contention: bool = True,
          activation_fraction=None,
          memory_headroom: float = common.DEFAULT_HEADROOM) -> np.ndarray:
  """m-ETF with LP-chosen favorite children; deterministic."""
  del seed
  view = common.group_view(graph, topology)
  model = common.memory_model(view, activation_fraction=activation_fraction,
                              memory_headroom=memory_headroom)
  if view.primary.size > 1 and graph.num_edges:
    favorite = favorite_parents(view, window=max(2, int(lp_window)))
  else:
    favorite = np.full(graph.num_nodes, -1, np.int64)
  common.note("favorite_edges", int((favorite >= 0).sum()))
  placement, makespan, order = list_scheduler.schedule(
      view, model, favorite_parent=favorite,
      link_contention=link_contention)
  common.note("scheduled_makespan_us", round(makespan, 3))
  common.note_priority(order)  # each device runs its ops in list order
  return placement


def favorite_parents(view: common.GroupView, *, window: int) -> np.ndarray:
  """int64[n]: each op's favorite parent from the windowed LP, or -1."""
  graph = view.graph
  plan = simulator.prepare(graph)
  n = graph.num_nodes
  candidate = list_scheduler.candidate_devices(view)
  p = communication.mean_op_times(view, candidate)
  src, dst, cost = _pairs(view)
  window_of = plan.rank // window
  pair_window = window_of[dst]
  by_window = np.argsort(pair_window, kind="stable")
  bounds = np.searchsorted(pair_window[by_window],
                           np.arange(window_of.max() + 2))
  start = np.zeros(n)
  has_child = np.zeros(n, np.bool_)
  favorite = np.full(n, -1, np.int64)
  failures = 0
  for k in range(int(window_of.max()) + 1):
    ops = plan.order[k * window:(k + 1) * window]
    pairs = by_window[bounds[k]:bounds[k + 1]]
    solution = _solve_window(ops, src[pairs], dst[pairs], cost[pairs], p,
                             start, has_child)
    if solution is None:
      failures += 1
      start[ops] = _earliest_starts(ops, src[pairs], dst[pairs], cost[pairs],
                                    p, start)
      continue
    start[ops], x = solution
    chosen = pairs[x < 0.5]
    # The LP allows at most one per parent and per child; enforce it
    # against rounding noise, smallest x first.
    chosen = chosen[np.argsort(x[x < 0.5], kind="stable")]
    for pair in chosen:
      u, v = int(src[pair]), int(dst[pair])
      if not has_child[u] and favorite[v] < 0:
        has_child[u] = True
        favorite[v] = u
  common.note("lp_windows", int(window_of.max()) + 1)
  if failures:
    common.note("lp_windows_failed", failures)
  return favorite


def _pairs(view: common.GroupView) -> tuple:
  """(src, dst, c) per distinct (u, v) op pair; c = mean transfer time."""
  graph = view.graph
  is_data, _, nbytes = communication.edge_costs(view)
  latency, per_byte = communication.mean_link(view, view.primary)
  n = graph.num_nodes
  key = graph.edge_src.astype(np.int64) * n + graph.edge_dst
  pair, inverse = np.unique(key, return_inverse=True)
  data_bytes = np.bincount(inverse, weights=np.where(is_data, nbytes, 0.0),
                           minlength=pair.shape[0])
  src, dst = pair // n, pair % n
  cost = latency + data_bytes * per_byte
  cost[view.group_of[src] == view.group_of[dst]] = 0.0
  return src, dst, cost


def _solve_window(ops, src, dst, cost, p, start, has_child):
  """LP of one window; (start times of `ops`, x per pair) or None."""
  num_ops, num_pairs = ops.shape[0], src.shape[0]
  local = {int(v): i for i, v in enumerate(ops)}
  s_dst = np.array([local[int(v)] for v in dst], np.int64)
  s_src = np.array([local.get(int(u), -1) for u in src], np.int64)
  inside = s_src >= 0
  x_col = num_ops + np.arange(num_pairs)
  w_col = num_ops + num_pairs
  rows, cols, values, rhs = [], [], [], []
  row = 0

  def add(block_rows, block_cols, block_values):
    rows.append(block_rows)
    cols.append(block_cols)
    values.append(block_values)

  # Precedence: s_u - s_v + c x <= -p_u (s_u a constant before the window).
  r = row + np.arange(num_pairs)
  add(r, s_dst, -np.ones(num_pairs))
  add(r, x_col, cost)
  add(r[inside], s_src[inside], np.ones(int(inside.sum())))
  outside_start = np.where(inside, 0.0, start[src])
  rhs.append(-(p[src] + outside_start))
  row += num_pairs
  # Makespan: s_v - w <= -p_v.
  r = row + np.arange(num_ops)
  add(r, np.arange(num_ops), np.ones(num_ops))
  add(r, np.full(num_ops, w_col), -np.ones(num_ops))
  rhs.append(-p[ops])
  row += num_ops
  # At most one favorite child per parent (none if it has one already):
  # -sum x <= budget - k.
  parents, parent_index, per_parent = np.unique(src, return_inverse=True,
                                                return_counts=True)
  budget = np.where(has_child[parents], 0, 1)
  binding = per_parent > budget
  rank_of = np.cumsum(binding) - 1
  take = binding[parent_index]
  add(row + rank_of[parent_index[take]], x_col[take],
      -np.ones(int(take.sum())))
  rhs.append((budget - per_parent)[binding].astype(np.float64))
  row += int(binding.sum())
  # At most one favorite parent per child: -sum x <= 1 - indeg.
  children, child_index, per_child = np.unique(dst, return_inverse=True,
                                               return_counts=True)
  binding = per_child > 1
  rank_of = np.cumsum(binding) - 1
  take = binding[child_index]
  add(row + rank_of[child_index[take]], x_col[take],
      -np.ones(int(take.sum())))
  rhs.append((1 - per_child)[binding].astype(np.float64))
  row += int(binding.sum())
  del children

  # scipy's solver loads only when m-SCT runs: most placements never need it.
  from scipy import optimize  # pylint: disable=g-import-not-at-top
  from scipy import sparse  # pylint: disable=g-import-not-at-top
  matrix = sparse.csr_matrix(
      (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
      shape=(row, w_col + 1))
  objective = np.concatenate([
      np.full(num_ops, _START_WEIGHT / num_ops),
      np.full(num_pairs, -_NOT_FAVORITE_REWARD), [1.0]])
  bounds = np.zeros((w_col + 1, 2))
  bounds[:, 1] = np.inf
  bounds[num_ops:w_col, 1] = 1.0
  result = optimize.linprog(objective, A_ub=matrix, b_ub=np.concatenate(rhs),
                            bounds=bounds, method="highs")
  if result.status != 0:
    return None
  return result.x[:num_ops], result.x[num_ops:w_col]


def _earliest_starts(ops, src, dst, cost, p, start):
  """Start times with every edge paying its cost (fallback if an LP fails)."""
  times = start.copy()
  times[ops] = 0.0
  by_dst = {}
  for u, v, c in zip(src, dst, cost):
    by_dst.setdefault(int(v), []).append((int(u), float(c)))
  for v in ops:
    for u, c in by_dst.get(int(v), ()):
      times[v] = max(times[v], times[u] + p[u] + c)
  return times[ops]
