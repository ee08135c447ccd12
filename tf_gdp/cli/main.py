"""`python -m tf_gdp <command> --flags` and the `tf-gdp` console script.

Each command is a module of this package with its own absl flags and a
`main(argv)`; only the chosen command's module is imported, so commands
never see each other's flags and `--help` shows just the command's own.
"""

import contextlib
import gc
import importlib
import sys

from tf_gdp.cli import runner
from tf_gdp.cli import startup_noise

COMMANDS = {
    "export-graph": ("tf_gdp.cli.export_graph",
                     "write a zoo model or a user graph as MetaGraphDef or op-graph JSON"),
    "place": ("tf_gdp.cli.place",
              "place graphs (files, globs, zoo models) with GDP or a baseline; "
              "one output folder each"),
    "evaluate": ("tf_gdp.cli.evaluate",
                 "the simulated step time, busy time and peak memory per "
                 "device of a placement file (or a baseline) on a graph"),
    "measure": ("tf_gdp.cli.measure_placement",
                "run a placed graph with the TF runtime (local, cpu-workers:K, "
                "grpc://) and time it"),
    "bench": ("tf_gdp.cli.bench",
              "compare placement methods on graphs and topologies (tables + JSON)"),
    "pretrain": ("tf_gdp.cli.pretrain",
                 "train a GDP policy with PPO on a set of graphs (checkpoints, TensorBoard)"),
    "finetune": ("tf_gdp.cli.finetune",
                 "fine-tune a pre-trained GDP policy on one graph, or place it zero-shot"),
    "calibrate": ("tf_gdp.cli.calibrate",
                  "measure this machine's cpu-workers:K links (and speed) for "
                  "the simulator"),
    "corpus build": ("tf_gdp.cli.corpus_build",
                     "build and cache the corpus's training-step graphs "
                     "(corpus:train, corpus:eval)"),
    "corpus list": ("tf_gdp.cli.corpus_list",
                    "the corpus's families, train/eval split and graphs"),
    "inspect": ("tf_gdp.cli.inspect_graph",
                "print node/edge counts, costs, memory and constraints of a graph"),
}


@contextlib.contextmanager
def imports_frozen():
  """Imports without garbage collection, then freezes what they made.

  A command's imports (TensorFlow above all) leave millions of long-lived
  objects, and every full collection afterwards walks them all: reading and
  placing GNMT-8 (59,679 ops) spent about 1.8 s of 10.6 in the collector.
  Frozen (`gc.freeze`), they are never walked again; collection goes on for
  everything made later.
  """
  gc.disable()
  try:
    yield
  finally:
    gc.freeze()
    gc.enable()


def usage() -> str:
  lines = ["usage: tf-gdp <command> [--flags]   (python -m tf_gdp <command>)",
           "", "commands:"]
  lines += [f"  {name:<14} {summary}" for name, (_, summary) in COMMANDS.items()]
  lines += ["", "`tf-gdp <command> --help` lists a command's flags."]
  return "\n".join(lines)


def run(argv=None) -> None:
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
    print(usage())
    sys.exit(0 if len(argv) >= 2 else 2)
  command = argv[1]
  if len(argv) > 2 and f"{command} {argv[2]}" in COMMANDS:
    command = f"{command} {argv.pop(2)}"  # a two-word command
  words = sorted(name for name in COMMANDS if name.startswith(command + " "))
  if command not in COMMANDS and words:
    sys.stderr.write(f"error: {command!r} needs a subcommand: "
                     f"{', '.join('tf-gdp ' + w for w in words)}\n")
    sys.exit(2)
  if command not in COMMANDS:
    sys.stderr.write(f"error: unknown command {command!r} (commands: "
                     f"{', '.join(COMMANDS)}; see tf-gdp --help)\n")
    sys.exit(2)
  quiet = (contextlib.nullcontext() if startup_noise.verbose(argv[2:])
           else startup_noise.StartupNoiseFilter())
  with quiet:
    with imports_frozen():
      module = importlib.import_module(COMMANDS[command][0])
    if any(arg in ("-h", "--help", "--helpshort", "-?") for arg in argv[2:]):
      print(runner.command_help(module, f"tf-gdp {command}"))
      sys.exit(0)
    runner.run_command(module.main, [f"tf-gdp {command}"] + argv[2:])
