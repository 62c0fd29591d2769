"""Finds a Python interpreter and its torch, and exposes them as @local_torch.

The interpreter is /usr/bin/python3 (Debian's, which sees python3-torch), or
the one `--repo_env=PSYNC_PYTHON=/path/to/python` names (a virtualenv's with
a pip torch 2.x, a CUDA build included). The rule asks that interpreter, once
when the repository is fetched (`bazel sync --configure` after installing or
upgrading torch), for its headers, pybind11's, and torch's C++ headers and
libraries (torch.utils.cpp_extension), torch.__version__ and the C++ ABI
torch was built with.

@local_torch//:config.bzl defines TORCH_FOUND, TORCH_VERSION,
TORCH_CXX11_ABI, TORCH_COPTS (the -D_GLIBCXX_USE_CXX11_ABI define, for the
one file that includes torch headers: it must not spread to the rest of the
build, which uses the system's ABI), PYTHON (the interpreter), EXT_SUFFIX
and TORCH_MISSING (why there is no torch, or ""). Targets: :python_headers,
:pybind11, :torch (headers, and libraries linked with an rpath).

Without torch (or without the interpreter, Python's headers or pybind11) the
rule still succeeds: the targets are empty, TORCH_FOUND is False and the
targets that need torch are tagged manual (worker/torch/BUILD), so
`bazel build //...` and `bazel test //...` pass by them, and building them
by name fails with TORCH_MISSING.
"""

_DEFAULT_PYTHON = "/usr/bin/python3"

# Prints one JSON line last: what the interpreter knows; "missing" says what
# it lacks.
_PROBE = r"""
import json, os, sys, sysconfig
info = {"python": sys.executable, "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or ".so",
        "python_include": sysconfig.get_paths()["include"], "missing": []}
if not os.path.exists(os.path.join(info["python_include"], "Python.h")):
    info["missing"].append("Python's headers (no Python.h in %s: install python3-dev)"
                           % info["python_include"])
try:
    import torch
    from torch.utils import cpp_extension
    info["torch_version"] = torch.__version__
    info["torch_cxx11_abi"] = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    info["torch_include"] = [p for p in cpp_extension.include_paths() if os.path.isdir(p)]
    info["torch_lib"] = [p for p in cpp_extension.library_paths() if os.path.isdir(p)]
    if not any(os.path.exists(os.path.join(p, "torch", "csrc", "autograd", "python_variable.h"))
               for p in info["torch_include"]):
        info["missing"].append("torch %s's C++ headers (install libtorch-dev for Debian's torch)"
                               % torch.__version__)
except Exception as e:
    info["missing"].append("torch (import torch: %s: %s)" % (type(e).__name__, e))
# torch's own pybind11 first (a pip torch ships the one it was built with),
# then the pybind11 module's, then Debian's pybind11-dev.
candidates = info.get("torch_include", [])[:1]
try:
    import pybind11
    candidates.append(pybind11.get_include())
except ImportError:
    pass
candidates.append("/usr/include")
found = [p for p in candidates if os.path.exists(os.path.join(p, "pybind11", "pybind11.h"))]
if found:
    info["pybind11_include"] = os.path.join(found[0], "pybind11")
else:
    info["missing"].append("pybind11 (install pybind11-dev)")
print(json.dumps(info))
"""

def _missing(ctx, python, why):
    ctx.file("config.bzl", "\n".join([
        "TORCH_FOUND = False",
        "TORCH_VERSION = \"\"",
        "TORCH_CXX11_ABI = -1",
        "TORCH_COPTS = []",
        "PYTHON = %r" % python,
        "EXT_SUFFIX = \".so\"",
        "TORCH_MISSING = %r" % why,
        "",
    ]))
    ctx.file("BUILD", "\n".join(['package(default_visibility = ["//visibility:public"])', ""] +
                                ['cc_library(name = "%s")' % n for n in ["python_headers", "pybind11", "torch"]]) + "\n")

def _link_dirs(ctx, prefix, paths):
    """Symlinks each of `paths` as prefix0, prefix1, ...; returns those names."""
    names = []
    for i, p in enumerate(paths):
        name = "%s%d" % (prefix, i)
        ctx.symlink(p, name)
        names.append(name)
    return names

def _headers(name, dirs, extra = ""):
    return """cc_library(
    name = "{name}",
    hdrs = glob([{globs}]),
    includes = {dirs},{extra}
)
""".format(name = name, globs = ", ".join(['"%s/**/*.h"' % d for d in dirs] + ['"%s/**/*.hpp"' % d for d in dirs]), dirs = repr(dirs), extra = extra)

def _torch_configure_impl(ctx):
    python = ctx.os.environ.get("PSYNC_PYTHON", _DEFAULT_PYTHON)
    if not ctx.path(python).exists:
        _missing(ctx, python, "no Python interpreter at %s (install python3, or set --repo_env=PSYNC_PYTHON=/path/to/python)" % python)
        return
    result = ctx.execute([python, "-c", _PROBE], timeout = 120, environment = {"PYTHONNOUSERSITE": "1"})
    lines = result.stdout.strip().split("\n")
    if result.return_code != 0 or not lines[-1].startswith("{"):
        _missing(ctx, python, "%s could not be asked about torch: %s" % (python, result.stderr.strip()[-500:]))
        return
    info = json.decode(lines[-1])
    if info["missing"]:
        _missing(ctx, python, "%s lacks %s; run deploy/bootstrap.sh, or point --repo_env=PSYNC_PYTHON at an interpreter with torch (docs/torch.md)" % (python, "; ".join(info["missing"])))
        return

    ctx.symlink(info["python_include"], "python_include")
    ctx.symlink(info["pybind11_include"], "pybind11_include/pybind11")
    torch_dirs = _link_dirs(ctx, "torch_include", info["torch_include"])
    libs = info["torch_lib"]
    linkopts = []
    for lib in libs:
        linkopts += ["-L" + lib, "-Wl,-rpath," + lib]
    linkopts += ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    abi = info["torch_cxx11_abi"]
    ctx.file("config.bzl", "\n".join([
        "TORCH_FOUND = True",
        "TORCH_VERSION = %r" % info["torch_version"],
        "TORCH_CXX11_ABI = %d" % abi,
        "TORCH_COPTS = [\"-D_GLIBCXX_USE_CXX11_ABI=%d\"]" % abi,
        "PYTHON = %r" % info["python"],
        "EXT_SUFFIX = %r" % info["ext_suffix"],
        "TORCH_MISSING = \"\"",
        "",
    ]))
    ctx.file("BUILD", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "",
        _headers("python_headers", ["python_include"]),
        _headers("pybind11", ["pybind11_include"], "\n    deps = [\":python_headers\"],"),
        _headers("torch", torch_dirs, "\n    linkopts = %r,\n    deps = [\":pybind11\"]," % linkopts),
    ]))

torch_configure = repository_rule(
    implementation = _torch_configure_impl,
    environ = ["PSYNC_PYTHON"],
    configure = True,
)
