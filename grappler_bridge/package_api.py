"""How a package shows its public surface: a fixed `dir()` and lazy names.

A package's public names are what it re-exports plus the submodules it calls
public. Python adds a submodule to its package's attributes only once
something imports it, so a plain `dir(package)` would depend on what ran
before and would list internal modules too. `install` gives the package a
`__dir__` with exactly its public names and a `__getattr__` (PEP 562) that
imports a public submodule, or a name kept in a TensorFlow module, on first
use, so every listed name can be reached without importing what it does not
need. tf_gdp's packages use it too; golden lists of these names in the tests
make API changes deliberate.
"""

import importlib
from typing import Iterable, Mapping, Optional


def install(namespace: dict, *, modules: Iterable[str] = (),
            lazy: Optional[Mapping[str, str]] = None) -> None:
  """Gives the package whose globals are `namespace` its public surface.

  Args:
    namespace: the package's `globals()`; its `__all__` lists the names it
      re-exports.
    modules: its public submodules (imported on first attribute access).
    lazy: public names defined in modules that are imported only on first
      use (name -> defining module), e.g. classes that need TensorFlow.
  """
  package = namespace["__name__"]
  modules = tuple(modules)
  lazy = dict(lazy or {})
  public = sorted(set(namespace.get("__all__", ())) | set(modules) | set(lazy))

  def __getattr__(name):  # pylint: disable=invalid-name
    if name in modules:
      return importlib.import_module(f"{package}.{name}")
    if name in lazy:
      value = getattr(importlib.import_module(lazy[name]), name)
      namespace[name] = value
      return value
    raise AttributeError(f"module {package!r} has no attribute {name!r}")

  def __dir__():  # pylint: disable=invalid-name
    return list(public)

  namespace["__getattr__"] = __getattr__
  namespace["__dir__"] = __dir__
