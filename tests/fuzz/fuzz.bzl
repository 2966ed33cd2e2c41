"""A fuzz target: a library with LLVMFuzzerTestOneInput, a test that replays its seed
corpus (corpus/<name>/) in the ordinary build, and a libFuzzer binary (<name>_libfuzzer,
manual: built by run_fuzzers.sh with clang)."""

def fuzz_target(name, deps):
    native.cc_library(
        name = name + "_lib",
        srcs = [name + ".cc"],
        deps = deps,
        alwayslink = True,
    )
    native.cc_test(
        name = name + "_corpus_test",
        srcs = ["replay_main.cc"],
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [":" + name + "_lib"],
    )
    native.cc_binary(
        name = name + "_libfuzzer",
        linkopts = ["-fsanitize=fuzzer"],
        deps = [":" + name + "_lib"],
        tags = ["manual"],
    )
