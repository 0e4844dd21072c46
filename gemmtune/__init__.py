"""gemmtune: an auto-tuner for OpenCL GEMM kernels.

Public API: ``gemm`` (GEMM on numpy arrays on any OpenCL device), ``Gemm`` (in place on
pyopencl arrays), ``best_config`` (the tuned configuration for a problem, from the results
database), ``list_devices``, ``load_space`` / ``valid_configs`` (the search space),
``GemmtuneError``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gemmtune")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.0.0"

from gemmtune.errors import GemmtuneError  # noqa: E402
from gemmtune.space import Config, load_space  # noqa: E402
from gemmtune.space.valid import valid_configs  # noqa: E402


def __getattr__(name):
    # OpenCL-backed names load lazily, so `import gemmtune` works for the pure-Python parts.
    if name == "gemm":
        from gemmtune.call.compute import gemm
        return gemm
    if name == "Gemm":
        from gemmtune.call.compute import Gemm
        return Gemm
    if name == "best_config":  # no OpenCL itself, but it pulls in pandas and SQLAlchemy
        from gemmtune.db.tuned import best_config
        return best_config
    if name == "list_devices":
        from gemmtune.devices.opencl import list_devices
        return list_devices
    raise AttributeError(f"module 'gemmtune' has no attribute {name!r}")


__all__ = ["Config", "Gemm", "GemmtuneError", "best_config", "gemm", "list_devices", "load_space",
           "valid_configs", "__version__"]
