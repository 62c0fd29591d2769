"""psync: synchronous data-parallel training on parameter servers, from torch.

Importing psync loads its C++ extension, built against one torch: before
loading it, the import checks that the torch this interpreter loads is that
torch (its version and C++ ABI) and raises ImportError naming both if not.
Rebuild against the torch you use (docs/torch.md).

The low-level client of the servers is :class:`psync.torch.Client`.
"""

import torch as _torch

from . import _build_info


def _check_torch() -> None:
    built = (_build_info.TORCH_VERSION, _build_info.TORCH_CXX11_ABI)
    loaded = (_torch.__version__, int(_torch._C._GLIBCXX_USE_CXX11_ABI))
    if built != loaded:
        raise ImportError(
            f"psync was built for torch {built[0]} (C++11 ABI {built[1]}) but this "
            f"interpreter loaded torch {loaded[0]} (C++11 ABI {loaded[1]}) from "
            f"{_torch.__file__}: rebuild psync against it "
            f"(bazel build --repo_env=PSYNC_PYTHON=<this python> //worker/torch:psync; "
            f"see docs/torch.md)")


_check_torch()

try:
    from . import _psync
except ImportError as e:
    raise ImportError(
        f"psync's extension did not load ({e}); it was built for "
        f"{_build_info.PYTHON} (extension suffix {_build_info.EXT_SUFFIX}): "
        f"import psync with that interpreter, or rebuild (docs/torch.md)") from e

if (_psync.built_torch_version, _psync.built_cxx11_abi) != (
        _build_info.TORCH_VERSION, _build_info.TORCH_CXX11_ABI):
    raise ImportError(
        f"psync's extension was built for torch {_psync.built_torch_version} but its "
        f"package for torch {_build_info.TORCH_VERSION}: the files come from two builds; "
        f"install them again from one (docs/torch.md)")

Error = _psync.Error
InvalidArgumentError = _psync.InvalidArgumentError
built_torch_version: str = _build_info.TORCH_VERSION

__all__ = ["Error", "InvalidArgumentError", "built_torch_version"]
