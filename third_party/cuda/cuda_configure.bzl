"""Finds a CUDA toolkit (with NCCL) on the build machine.

Creates @local_cuda with :cudart and :nccl and defs.bzl's HAS_CUDA (and HAS_NVCC, CUDA_PATH). Where the toolkit is
absent (a plain Debian machine), HAS_CUDA is False and the GPU backends are left out of
the build; everything else builds the same. The toolkit's directory is CUDA_PATH, else
/usr/local/cuda. Binaries find the libraries through an rpath to it, or through
LD_LIBRARY_PATH on machines that carry their own (a PyTorch installation's).
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    needed = [
        "include/cuda_runtime.h",
        "include/nccl.h",
        "lib64/libcudart.so",
        "lib64/libnccl.so",
    ]
    found = all([ctx.path(root + "/" + f).exists for f in needed])
    if found:
        ctx.symlink(root + "/include", "include")
        ctx.symlink(root + "/lib64/libcudart.so", "lib/libcudart.so")
        ctx.symlink(root + "/lib64/libnccl.so", "lib/libnccl.so")
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cudart",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    srcs = ["lib/libcudart.so"],
    linkopts = ["-Wl,-rpath,{root}/lib64"],
)

cc_library(
    name = "nccl",
    srcs = ["lib/libnccl.so"],
    deps = [":cudart"],
)
""".format(root = root)
    else:
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cudart")

cc_library(name = "nccl")
"""
    ctx.file("BUILD.bazel", build)
    # nvcc builds the CUDA kernels (transport/gpu/*.cu); a toolkit without it builds the rest.
    has_nvcc = found and ctx.path(root + "/bin/nvcc").exists
    ctx.file("defs.bzl", "HAS_CUDA = {}\nHAS_NVCC = {}\nCUDA_PATH = \"{}\"\n".format(
        found,
        has_nvcc,
        root if found else "",
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
