"""Speed and memory of the device kinds an op graph is costed for.

The roofline cost model (`roofline`) needs, per device kind, the peak compute
rate, the memory bandwidth, the fixed overhead of launching one kernel and the
memory capacity. The presets describe real hardware from vendor datasheets,
plus one core of the machine this project is developed on, measured.
"""

import dataclasses

from grappler_bridge import errors

_GIB = 1 << 30
# Device kinds a spec may describe; they are the keys of a node's `cost` map.
KINDS = ("GPU", "CPU")


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
  """Roofline parameters of one device.

  Attributes:
    name: lowercase preset name, e.g. "p100"; appears in cost sources.
    kind: device kind, "GPU" or "CPU".
    peak_gflops: peak fp32 rate in GFLOP/s.
    mem_bandwidth_gbps: device memory bandwidth in GB/s (10^9 bytes/s).
    launch_overhead_us: fixed cost of running one kernel, in microseconds.
    memory_bytes: device memory capacity in bytes.
  """
  name: str
  kind: str
  peak_gflops: float
  mem_bandwidth_gbps: float
  launch_overhead_us: float
  memory_bytes: int

  def __post_init__(self):
    if self.kind not in KINDS:
      raise errors.InputError(
          f"hardware spec {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
    if min(self.peak_gflops, self.mem_bandwidth_gbps) <= 0:
      raise errors.InputError(
          f"hardware spec {self.name!r}: peak and bandwidth must be positive")
    if self.launch_overhead_us < 0 or self.memory_bytes <= 0:
      raise errors.InputError(
          f"hardware spec {self.name!r}: overhead must be >= 0, memory > 0")


# GPU kernel launch overhead: a CUDA launch plus TF executor bookkeeping costs
# about 5 us per kernel (CUDA launch latency is ~3-5 us in NVIDIA's own
# measurements; TF adds ~1 us of executor work per op).
_GPU_LAUNCH_US = 5.0

# NVIDIA Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOPS fp32, 732 GB/s HBM2.
P100 = HardwareSpec(
    name="p100", kind="GPU", peak_gflops=9300.0, mem_bandwidth_gbps=732.0,
    launch_overhead_us=_GPU_LAUNCH_US, memory_bytes=16 * _GIB)

# NVIDIA Tesla V100 SXM2 32 GB datasheet: 15.7 TFLOPS fp32, 900 GB/s HBM2.
V100 = HardwareSpec(
    name="v100", kind="GPU", peak_gflops=15700.0, mem_bandwidth_gbps=900.0,
    launch_overhead_us=_GPU_LAUNCH_US, memory_bytes=32 * _GIB)

# NVIDIA H100 SXM5 80 GB datasheet: 67 TFLOPS fp32 (non-tensor-core),
# 3.35 TB/s HBM3.
H100 = HardwareSpec(
    name="h100", kind="GPU", peak_gflops=67000.0, mem_bandwidth_gbps=3350.0,
    launch_overhead_us=_GPU_LAUNCH_US, memory_bytes=80 * _GIB)

# The host of an NVIDIA DGX-1 (the P100/V100 servers of the GDP/HDP papers):
# 2x Intel Xeon E5-2698 v4 (Intel ARK: 20 cores, 2.2 GHz base, AVX2 with two
# 256-bit FMA units = 32 fp32 FLOP/cycle/core; 4 channels DDR4-2400 =
# 76.8 GB/s per socket) and 512 GB of RAM (DGX-1 datasheet).
# Peak: 2 * 20 * 2.2 GHz * 32 = 2816 GFLOP/s; bandwidth: 2 * 76.8 GB/s.
# Per-op overhead of TF's CPU executor: ~1-2 us (an op dispatch plus an output
# allocation); 1.5 us.
HOST_CPU = HardwareSpec(
    name="host-cpu", kind="CPU", peak_gflops=2816.0, mem_bandwidth_gbps=153.6,
    launch_overhead_us=1.5, memory_bytes=512 * _GIB)

# One core of the development machine (AMD EPYC with AVX-512, 2 cores, 23 GB
# RAM), measured with one thread (OMP/OpenBLAS/TF intra- and inter-op
# threads = 1), medians of 7 runs:
#   numpy 1024x1024 fp32 matmul: ~100 GFLOP/s; tf.matmul (tf.function, same
#   size): ~80 GFLOP/s; the 94 Conv2D of an Inception-v3 training step
#   (batch 4, oneDNN, profiled with costs.profile_step): ~108 GFLOP/s
#   -> peak 100;
#   np.copyto of 256 MB: ~28 GB/s read+write; tf `x + 1` on 64 MB: ~26 GB/s
#   read+write -> 26 GB/s;
#   a chain of 1000 scalar adds in a tf.compat.v1.Session with the meta
#   optimizer off: ~0.4-0.5 us per op; real ops also allocate outputs, so 1 us.
# Memory: half of the machine's 23 GB, as one core is one of two workers.
LOCAL_CPU_CORE = HardwareSpec(
    name="local-cpu-core", kind="CPU", peak_gflops=100.0,
    mem_bandwidth_gbps=26.0, launch_overhead_us=1.0, memory_bytes=11 * _GIB)

SPECS = {spec.name: spec for spec in (P100, V100, H100, HOST_CPU,
                                      LOCAL_CPU_CORE)}


def get_spec(name: str) -> HardwareSpec:
  """Looks a preset up by name (case-insensitive, `_` same as `-`)."""
  key = str(name).strip().lower().replace("_", "-")
  if key not in SPECS:
    raise errors.InputError(
        f"unknown hardware {name!r}; known: {', '.join(sorted(SPECS))}")
  return SPECS[key]
