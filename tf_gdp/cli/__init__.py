"""The `tf-gdp` command line: one module per command, thin absl mains.

`run_command(main, argv)` runs any absl `main` with the command line's
contract (exit 0, 2 with one line for bad input, 1 for an internal error;
tracebacks only with --verbosity=1); the examples use it too.
"""

from grappler_bridge import package_api as _package_api
from tf_gdp.cli.runner import run_command

__all__ = ["run_command"]

_package_api.install(globals())
