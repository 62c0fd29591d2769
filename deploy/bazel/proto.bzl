"""C++ code for a .proto with gRPC services, from the system protoc."""

def cc_grpc_proto(name, src, visibility = None):
    """Generates <name>_cc_proto (messages) and <name>_cc_grpc (services).

    Genrules that call system tools are not re-run when the tools change:
    after upgrading protobuf or gRPC, run `bazel clean`.
    """
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = [base + ext for ext in [".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc"]],
        cmd = " ".join([
            "/usr/bin/protoc",
            "--proto_path=.",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin",
            "$(location %s)" % src,
        ]),
    )
    native.cc_library(
        name = name + "_cc_proto",
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        visibility = visibility,
        deps = ["@system//:grpc"],
    )
    native.cc_library(
        name = name + "_cc_grpc",
        srcs = [base + ".grpc.pb.cc"],
        hdrs = [base + ".grpc.pb.h"],
        visibility = visibility,
        deps = [
            ":" + name + "_cc_proto",
            "@system//:grpc",
        ],
    )
