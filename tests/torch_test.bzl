"""psync_torch_test: a Python test of the torch package against real servers."""

load("@local_torch//:config.bzl", "PYTHON", "TORCH_FOUND")

# What every torch test runs: the package and the server it trains against.
_DATA = [
    "//server:psync_server",
    "//worker/torch:psync",
]

def psync_torch_test(name, data = [], size = "medium"):
    """`name`.py run by the interpreter psync was built for (run_python_test.sh).

    Without a torch the package is not built, and the test is tagged manual,
    so that //... leaves it out.

    Args:
      name: the test's name; its script is `name`.py.
      data: what it needs besides the script, the package and psync_server.
      size: Bazel's size, for the timeout (medium: 300 s).
    """
    script = name + ".py"
    native.sh_test(
        name = name,
        size = size,
        srcs = ["run_python_test.sh"],
        args = [PYTHON, "$(location %s)" % script],
        data = [script] + _DATA + [d for d in data if d not in _DATA],
        tags = [] if TORCH_FOUND else ["manual"],
    )
