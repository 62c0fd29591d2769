"""Detects the CUDA toolkit and exposes it as @local_cuda.

@local_cuda//:config.bzl defines CUDA_ENABLED; @local_cuda//:cuda is a
cc_library with the CUDA headers and libraries when the toolkit is found and
an empty library otherwise. Force either way with
`--repo_env=PSYNC_CUDA=0` (off) or `=1` (on; fails if the toolkit is absent).
The toolkit path defaults to /usr/local/cuda; override with CUDA_PATH.
"""

def _cuda_configure_impl(ctx):
    switch = ctx.os.environ.get("PSYNC_CUDA", "auto")
    cuda_path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(cuda_path + "/bin/nvcc")
    found = nvcc.exists
    if switch == "1" and not found:
        fail("PSYNC_CUDA=1 but no nvcc at %s (set CUDA_PATH)" % nvcc)
    if switch not in ["0", "1", "auto"]:
        fail("PSYNC_CUDA=%s: expected 0, 1 or auto" % switch)
    enabled = found and switch != "0"

    ctx.file("config.bzl", "CUDA_ENABLED = %s\nCUDA_PATH = %r\n" % (enabled, cuda_path if enabled else ""))
    if enabled:
        ctx.symlink(cuda_path + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/crt/**", "include/cccl/**"]),
    includes = ["include", "include/cccl"],
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
    defines = ["PSYNC_HAVE_CUDA=1"],
)
""".format(lib = cuda_path + "/lib64")
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda")
"""
    ctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PSYNC_CUDA", "CUDA_PATH"],
)
