"""TensorFlow's C++ start-up notices are recognised; nothing else is."""

import os
import subprocess
import sys

from tf_gdp.cli import startup_noise

_NOTICES = [
    b"WARNING: All log messages before absl::InitializeLog() is called are "
    b"written to STDERR",
    b"I0000 00:00:1796113913.565879   13435 port.cc:153] oneDNN custom "
    b"operations are on. You may see slightly different numerical results.",
    b"I0000 00:00:1796113913.566971   13435 cudart_stub.cc:31] Could not find "
    b"cuda drivers on your machine, GPU will not be used.",
    b"E0000 00:00:1796113916.733920   13435 cuda_platform.cc:52] failed call "
    b"to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR",
    b"E0000 00:00:1796114315.852633   21243 util.cc:131] oneDNN supports "
    b"DT_INT32 only on platforms with AVX-512. Falling back to the default "
    b"Eigen-based implementation if present.",
]
_KEPT = [
    b"error: garbage.pb: not a binary GraphDef or MetaGraphDef",
    b"E0000 00:00:1796113916.733920   13435 grpc_server.cc:52] worker lost",
    b"I0000 00:00:1796113913.565879   13435 port.cc:153] something else",
    b"[1/1] layered_50",
]


def test_startup_notices_are_recognised():
  assert all(startup_noise.is_startup_notice(line) for line in _NOTICES)
  assert not any(startup_noise.is_startup_notice(line) for line in _KEPT)


def test_verbosity_is_read_before_flags_are_parsed():
  assert startup_noise.verbose(["--graph=x", "--verbosity=1"])
  assert startup_noise.verbose(["-v", "2"])
  assert not startup_noise.verbose(["--verbosity=0"])
  assert not startup_noise.verbose(["--graph=x"])
  assert not startup_noise.verbose(["--verbosity=loud"])


def test_filter_drops_notices_and_passes_other_lines_in_order():
  code = (
      "import os, sys\n"
      "from tf_gdp.cli import startup_noise\n"
      f"notices = {_NOTICES!r}\n"
      f"kept = {_KEPT!r}\n"
      "with startup_noise.StartupNoiseFilter():\n"
      "  for a, b in zip(notices, kept):\n"
      "    os.write(2, a + b'\\n')\n"
      "    sys.stderr.write(b.decode() + '\\n')\n"
      "sys.stderr.write('after\\n')\n")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          timeout=120, check=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert result.stderr.decode().splitlines() == (
      [b.decode() for b in _KEPT] + ["after"])
