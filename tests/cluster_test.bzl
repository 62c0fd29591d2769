"""psync_cluster_test: a test that runs a psync cluster on 127.0.0.1."""

# The binaries a cluster test starts, found through its runfiles
# (tests/test_util.h: Runfile).
_DAEMONS = [
    "//deploy/local:psync_launch",
    "//server:psync_ctl",
    "//server:psync_server",
    "//worker:psync_worker",
]

# What every cluster test's code uses.
_DEPS = [
    "//common/process:subprocess",
    "//tests:test_util",
    "@system//:absl",
    "@system//:gtest_main",
]

def psync_cluster_test(name, srcs, size, data = [], deps = [], **kwargs):
    """A cc_test with the daemons as data and the test utilities as deps.

    Args:
      name: the test's name.
      srcs: its sources.
      size: its Bazel size ("medium", "large").
      data: what it needs besides the daemons (scripts, other binaries).
      deps: what it uses besides test_util, subprocess, Abseil and gtest_main.
      **kwargs: any other cc_test attribute (tags, shard_count...).
    """
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        data = _DAEMONS + [d for d in data if d not in _DAEMONS],
        deps = _DEPS + [d for d in deps if d not in _DEPS],
        **kwargs
    )
