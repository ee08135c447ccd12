"""Runs one CLI command under absl with tf-gdp's exit-code contract.

Exit 0 on success; 2 with one line on stderr for bad input (a bad flag, a
malformed file, an illegal placement); 1 for an internal failure. Tracebacks
only with `--verbosity=1` (or `-v 1`).
"""

import sys
import traceback

from absl import app
from absl import flags

from tf_gdp import errors

FLAGS = flags.FLAGS


def command_help(module, program: str) -> str:
  """A command's usage: its module docstring, then its own flags in full.

  absl's `--help` lists only the flags of the `__main__` module, which for
  `python -m tf_gdp` is the dispatcher, not the command.
  """
  doc = (module.__doc__ or "").strip()
  own = FLAGS.module_help(module.__name__)
  return (f"usage: {program} [--flags]\n\n{doc}\n\nflags:\n{own}\n\n"
          "Try --helpfull for absl's and TensorFlow's flags too.")


def run_command(main, argv) -> None:
  app.run(lambda args: _guarded(main, args), argv=argv, flags_parser=_parse_flags)


def _parse_flags(argv):
  try:
    return FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(f"error: {e}\n")
    sys.exit(2)


def _guarded(main, argv):
  extra = argv[1:]
  if extra:
    sys.stderr.write(f"error: unexpected argument(s) {extra}; use --flag=value\n")
    sys.exit(2)
  try:
    main(argv)
  except errors.InputError as e:
    _report(f"error: {e}", 2)
  except OSError as e:
    # A path the user gave that cannot be made, read or written: the file
    # system's answer, said once.
    path = e.filename2 or e.filename  # a rename names its target second
    _report(f"error: {path}: {e.strerror}" if path and e.strerror
            else f"error: {e}", 2)
  except KeyboardInterrupt:
    _report("interrupted", 130)
  except Exception as e:  # pylint: disable=broad-except
    _report(f"internal error: {type(e).__name__}: {e}", 1)


def _report(line: str, code: int) -> None:
  if FLAGS.is_parsed() and FLAGS.verbosity >= 1:
    traceback.print_exc()
  sys.stderr.write(line.splitlines()[0] if line else "error" )
  sys.stderr.write("\n")
  sys.exit(code)
