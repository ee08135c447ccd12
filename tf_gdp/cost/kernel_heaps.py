"""The binary heaps and ready lists the compiled simulator pass runs on.

Flat numpy arrays only, numba-compiled (`compiled.jit`): an event heap
ordered by (time, code), key heaps packed per device in one array, and a
device's ready ops as a key heap or, for an executor that runs the op made
ready last, a stack.
"""

import numpy as np

from tf_gdp.cost import compiled


@compiled.jit
def less(t1, c1, t2, c2):
  return t1 < t2 or (t1 == t2 and c1 < c2)


@compiled.jit
def event_push(times, codes, size, t, c):
  """Pushes (t, c) on the binary min-heap times/codes[:size]; new size."""
  i = size
  while i > 0:
    parent = (i - 1) >> 1
    if not less(t, c, times[parent], codes[parent]):
      break
    times[i] = times[parent]
    codes[i] = codes[parent]
    i = parent
  times[i] = t
  codes[i] = c
  return size + 1


@compiled.jit
def event_pop(times, codes, size):
  """Removes the minimum (read times[0], codes[0] first); new size."""
  size -= 1
  t = times[size]
  c = codes[size]
  i = 0
  while True:
    child = 2 * i + 1
    if child >= size:
      break
    right = child + 1
    if right < size and less(times[right], codes[right], times[child],
                              codes[child]):
      child = right
    if not less(times[child], codes[child], t, c):
      break
    times[i] = times[child]
    codes[i] = codes[child]
    i = child
  times[i] = t
  codes[i] = c
  return size


@compiled.jit
def rank_push(heap, base, size, key):
  """Pushes `key` on the min-heap heap[base:base + size]; new size."""
  base = np.int64(base)
  size = np.int64(size)
  i = size
  while i > 0:
    parent = (i - 1) >> 1
    if heap[base + parent] <= key:
      break
    heap[base + i] = heap[base + parent]
    i = parent
  heap[base + i] = key
  return size + 1


@compiled.jit
def rank_pop(heap, base, size):
  """Pops the minimum of heap[base:base + size]; (minimum, new size)."""
  base = np.int64(base)
  size = np.int64(size) - 1
  top = heap[base]
  key = heap[base + size]
  i = 0
  while True:
    child = 2 * i + 1
    if child >= size:
      break
    if child + 1 < size and heap[base + child + 1] < heap[base + child]:
      child += 1
    if heap[base + child] >= key:
      break
    heap[base + i] = heap[base + child]
    i = child
  heap[base + i] = key
  return top, size


@compiled.jit
def ready_push(ready, base, size, v, ready_key, lifo):
  """Makes op v ready: on the device's stack (lifo) or its key heap."""
  if lifo:
    ready[np.int64(base) + np.int64(size)] = v
    return np.int64(size) + 1
  return rank_push(ready, base, size, ready_key[v])


@compiled.jit
def ready_pop(ready, base, size, key_node, lifo):
  """(the op the device runs next, new size)."""
  if lifo:
    size = np.int64(size) - 1
    return ready[np.int64(base) + size], size
  r, size = rank_pop(ready, base, size)
  return key_node[r], size
