"""Detects the CUDA toolkit and exposes it as @local_cuda.

@local_cuda//:config.bzl defines CUDA_ENABLED and NVCC. When the toolkit is
found, @local_cuda//:cudart, :cublas, :cudnn and :nccl link its libraries
(with an rpath) and carry its headers; otherwise they are empty, and code
that needs them is left out of the build (see //worker/gpu).
Force either way with `--repo_env=PSYNC_CUDA=0` (or `--config=nocuda`) and
`--repo_env=PSYNC_CUDA=1` (fails if the toolkit is absent). The toolkit path
defaults to /usr/local/cuda; override with CUDA_PATH.
"""

_LIBS = {"cudart": "cudart", "cublas": "cublas", "cudnn": "cudnn", "nccl": "nccl"}

def _cuda_configure_impl(ctx):
    switch = ctx.os.environ.get("PSYNC_CUDA", "auto")
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(cuda_path + "/bin/nvcc")
    if switch not in ["0", "1", "auto"]:
        fail("PSYNC_CUDA=%s: expected 0, 1 or auto" % switch)
    if switch == "1" and not nvcc.exists:
        fail("PSYNC_CUDA=1 but there is no nvcc at %s (set CUDA_PATH)" % nvcc)
    enabled = nvcc.exists and switch != "0"

    ctx.file("config.bzl", "CUDA_ENABLED = %s\nNVCC = %r\n" % (enabled, str(nvcc) if enabled else ""))
    lines = ['package(default_visibility = ["//visibility:public"])', ""]
    if enabled:
        ctx.symlink(cuda_path + "/include", "include")
        lib = cuda_path + "/lib64"
        lines.append("""cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/*.h", "include/crt/**", "include/cccl/**"]),
    includes = ["include", "include/cccl"],
)
""")
        for name, lib_name in _LIBS.items():
            lines.append("""cc_library(
    name = "{name}",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-l{lib_name}"],
    deps = [":cuda_headers"],
)
""".format(name = name, lib = lib, lib_name = lib_name))
    else:
        for name in ["cuda_headers"] + _LIBS.keys():
            lines.append('cc_library(name = "%s")\n' % name)
    ctx.file("BUILD", "\n".join(lines))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PSYNC_CUDA", "CUDA_PATH"],
    # `bazel sync --configure` runs it again (after a toolkit upgrade).
    configure = True,
)
