"""cuda_library: .cu files compiled by nvcc inside Bazel.

Each .cu becomes an object through a genrule calling nvcc (for sm_80 and
sm_90, plus sm_90 PTX for newer GPUs, position-independent), and the objects form a cc_library that links
cudart. The .cu files may include CUDA headers and the `hdrs` given here
(by their workspace path); nothing else. Only used where CUDA_ENABLED.
"""

load("@local_cuda//:config.bzl", "NVCC")

def cuda_library(name, srcs, hdrs = [], deps = [], tags = [], visibility = None):
    objects = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            tags = tags,
            cmd = " ".join([
                NVCC,
                "-c -O3 -std=c++17 -Xcompiler -fPIC",
                "-gencode arch=compute_80,code=sm_80",
                "-gencode arch=compute_90,code=sm_90",
                # PTX too, so that newer GPUs can compile the kernels at load.
                "-gencode arch=compute_90,code=compute_90",
                "-I.",
                "-o $@",
                "$(location %s)" % src,
            ]),
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        tags = tags,
        visibility = visibility,
    )
