"""Exposes Debian's system libraries as cc_library targets via pkg-config.

pkg-config runs once when the repository is fetched (not at every server
start: the rule is not `local`). After installing or upgrading a library,
run `bazel sync --configure` to refresh the flags.
"""

_LIBS = {
    # target: pkg-config modules, extra link flags
    "absl": (["absl_flags_parse", "absl_flags", "absl_status", "absl_statusor",
              "absl_synchronization", "absl_strings", "absl_str_format",
              "absl_time", "absl_hash", "absl_random_random"], []),
    "grpc": (["grpc++", "protobuf"], ["-labsl_synchronization"]),
    "gtest": (["gtest"], []),
    "gtest_main": (["gtest_main"], []),
    "gmock": (["gmock"], []),
    "glog": (["libglog"], []),
    "openblas": (["openblas"], []),
    "zlib": (["zlib"], []),
    "httplib": (["cpp-httplib"], ["-lpthread"]),
    "openssl": (["openssl"], []),
}

def _pkg_config(ctx, args):
    result = ctx.execute(["pkg-config"] + args)
    if result.return_code != 0:
        fail("pkg-config %s failed: %s (run deploy/bootstrap.sh)" % (" ".join(args), result.stderr))
    return result.stdout.strip().split(" ") if result.stdout.strip() else []

def _system_libs_impl(ctx):
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, (modules, extra) in _LIBS.items():
        cflags = _pkg_config(ctx, ["--cflags"] + modules)
        libs = _pkg_config(ctx, ["--libs"] + modules) + extra
        lines.append("cc_library(")
        lines.append('    name = "%s",' % name)
        lines.append("    defines = %r," % [f[2:] for f in cflags if f.startswith("-D")])
        lines.append("    linkopts = %r," % [f for f in libs if f])
        lines.append(")")
        lines.append("")

    # Include paths are dropped on purpose: every header lives under
    # /usr/include, which the toolchain searches already (OpenBLAS's cblas.h
    # is reached through Debian's alternatives link
    # /usr/include/x86_64-linux-gnu/cblas.h).
    ctx.file("BUILD", "\n".join(lines))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    environ = ["PATH", "PKG_CONFIG_PATH"],
    # `bazel sync --configure` runs it again (after a library upgrade).
    configure = True,
)
