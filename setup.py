"""pip install for tf-gdp: the `tf_gdp` library and the `grappler_bridge`."""

import pathlib
import re

import setuptools

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(r'__version__ = "([^"]+)"',
                     (_HERE / "tf_gdp" / "version.py").read_text()).group(1)

# Verified together on Python 3.11; the notes on each pin are in the README
# ("Dependencies").
_INSTALL_REQUIRES = [
    "tensorflow==2.21.*",
    "tf-keras==2.21.*",
    "tensorflow-gnn==1.0.3",
    "tf-agents==0.19.0",
    "tensorflow-probability==0.23.*",
    "tensorboard==2.21.*",
    "numpy>=1.26,<2.4",
    "absl-py>=2.0",
    "numba>=0.68,<0.69",  # compiles the simulator core
    "scipy>=1.11",  # HiGHS LPs (lower bound with 3+ kinds, m-SCT)
    "matplotlib>=3.8",  # `place` writes Gantt charts (tf_gdp.viz)
    "pymetis>=2023.1",  # the policy's partition push (policy.features)
]

setuptools.setup(
    name="tf-gdp",
    version=_VERSION,
    description="Generalized device placement for TensorFlow graphs (GDP).",
    long_description=(_HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.13",
    packages=setuptools.find_packages(include=["tf_gdp", "tf_gdp.*",
                                               "grappler_bridge",
                                               "grappler_bridge.*"]),
    # Data shipped inside the wheel: the pre-trained policy (a tf.train.Checkpoint
    # and its JSON side files, any depth under tf_gdp/pretrained/) and any JSON
    # data file of the package. MANIFEST.in lists the same for the sdist.
    package_data={"tf_gdp": ["pretrained/**/*", "**/*.json"]},
    install_requires=_INSTALL_REQUIRES,
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-xdist>=3.5"],
        "bench": ["matplotlib>=3.8"],
        "distributed": ["psutil>=5.9"],
    },
    entry_points={"console_scripts": ["tf-gdp=tf_gdp.cli.main:run"]},
)
