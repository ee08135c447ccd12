"""What a reliability case is, and the small inputs several cases build.

A case builds its inputs in a temp folder, then either

* calls the Python API, which must raise the typed error (`error`) whose one
  line matches `expect`, or return an outcome line matching `expect`
  (`error=None`: e.g. an invalid Measurement's reason); and/or
* names CLI invocations (`cli`), each of which must exit with code 2 and one
  `error: ...` line on stderr matching `expect`, with no traceback and no
  file left in the output folder.

Cases whose CLI run would cost a TF import or a large file are `slow`; the
tests run those once, the script every time. The cases themselves are in
`reliability_input_cases` and `reliability_run_cases`, gathered in
`reliability_cases`.
"""

import contextlib
import dataclasses
import os
from typing import Callable, List, Optional

from tf_gdp import errors

OUT = "out"  # CLI output folder inside the case's temp folder
_TOPOLOGY_FORMAT = {"format": "tf-gdp-topology", "version": 1}


@dataclasses.dataclass(frozen=True)
class Case:
  """One reliability case.

  Attributes:
    name: short id (pytest id, table row).
    given: what the user gives, in words.
    expect: regex the one-line outcome must match.
    api: tmp dir -> None (raises `error`) or an outcome line.
    error: the InputError subclass the API raises; None when the API
      returns an outcome line instead.
    cli: tmp dir -> argv lists for `python -m tf_gdp` (after the API ran,
      so its inputs exist); None for API-only cases.
    env: extra environment for both (e.g. a lowered size limit).
    test: the test that proves the case (docs table).
    slow: the CLI (or the API) takes seconds; tests run it sparingly.
  """
  name: str
  given: str
  expect: str
  api: Callable[[str], Optional[str]]
  error: Optional[type] = errors.InputError
  cli: Optional[Callable[[str], List[List[str]]]] = None
  env: Optional[dict] = None
  test: str = ""
  slow: bool = False


# ---- input builders ------------------------------------------------------


def write(tmp: str, name: str, data) -> str:
  path = os.path.join(tmp, name)
  if isinstance(data, str):
    data = data.encode("utf-8")
  with open(path, "wb") as f:
    f.write(data)
  return path


def tiny_document(**changes) -> dict:
  """A valid 3-op op-graph document (a -> b -> c), with fields replaced."""
  nodes = [{"name": name, "op": op, "cost": {"GPU": cost},
            "output_bytes": 1024, "memory_bytes": 0}
           for name, op, cost in (("a", "MatMul", 5.0), ("b", "Relu", 1.0),
                                  ("c", "Relu", 1.0))]
  document = {"format": "tf-gdp-opgraph", "version": 1, "name": "tiny",
              "nodes": nodes,
              "edges": [{"src": 0, "dst": 1, "bytes": 1024},
                        {"src": 1, "dst": 2, "bytes": 1024}]}
  document.update(changes)
  return document


def node_changed(index: int, **fields) -> dict:
  document = tiny_document()
  document["nodes"][index].update(fields)
  return document


def topology_document(devices, bandwidth, **extra) -> dict:
  d = len(devices)
  return dict(_TOPOLOGY_FORMAT, name="t", hardware={"GPU": "p100"},
              devices=devices,
              links={"bandwidth_gbps": bandwidth,
                     "latency_us": [[0.0] * d for _ in range(d)]}, **extra)


def gpus(count: int, memory: int = 1 << 30) -> list:
  return [{"name": f"/job:localhost/replica:0/task:0/device:GPU:{i}",
           "kind": "GPU", "memory_bytes": memory} for i in range(count)]


def two_gpu_topology(memory: int = 1 << 30) -> dict:
  return topology_document(gpus(2, memory), [[0.0, 10.0], [10.0, 0.0]])


def place_cli(tmp: str, graph: str, devices: str) -> List[List[str]]:
  return [["place", f"--graphs={graph}", f"--devices={devices}",
           "--method=single_device", "--compare=", "--nopictures",
           f"--out={os.path.join(tmp, OUT)}"]]


@contextlib.contextmanager
def environment(env: Optional[dict]):
  """Sets environment variables for the duration (the API side of `env`)."""
  saved = {key: os.environ.get(key) for key in (env or {})}
  os.environ.update(env or {})
  try:
    yield
  finally:
    for key, value in saved.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value
