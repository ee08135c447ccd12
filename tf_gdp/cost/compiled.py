"""Compiles hot loops with numba, or runs them as plain Python without it.

The simulator, the lower bound and the list schedulers each run a tight loop
over flat arrays; they share this one decorator so that every compiled loop
is cached on disk the same way and all of them fall back together.
"""

try:
  import numba  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover - numba is an install requirement
  numba = None

HAVE_NUMBA = numba is not None


def jit(function):
  """Compiles `function` with numba (cached on disk) when numba is present.

  Without numba the same code runs as plain Python: correct but ~100x slower.
  """
  if numba is None:
    return function
  return numba.njit(cache=True, nogil=True, error_model="numpy")(function)
