"""Builds the refit package with its gRPC stubs generated from proto/refit.proto at build
time (Debian's protoc and grpc_python_plugin), so that no stub is kept in the source tree.

    python3 -m pip install --no-build-isolation ./client/python
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithStubs(build_py):
    """build_py, then the stubs into the built package's _proto folder."""

    def run(self):
        super().run()
        proto = os.environ.get("REFIT_PROTO", os.path.join(HERE, "..", "..", "proto", "refit.proto"))
        if not os.path.exists(proto):
            raise SystemExit(f"refit: {proto} not found: build from the refit repository, or "
                             f"set REFIT_PROTO to the path of refit.proto")
        for tool in ("protoc", "grpc_python_plugin"):
            if shutil.which(tool) is None:
                raise SystemExit(f"refit: {tool} not found: install Debian's protobuf-compiler "
                                 f"and protobuf-compiler-grpc")
        out = os.path.join(self.build_lib, "refit", "_proto")
        os.makedirs(out, exist_ok=True)
        subprocess.run(["protoc", f"-I{os.path.dirname(os.path.abspath(proto))}",
                        f"--python_out={out}", f"--grpc_python_out={out}",
                        f"--plugin=protoc-gen-grpc_python={shutil.which('grpc_python_plugin')}",
                        os.path.abspath(proto)], check=True)
        grpc_stub = os.path.join(out, "refit_pb2_grpc.py")
        with open(grpc_stub) as f:
            text = f.read()
        # The stubs import each other as top-level modules; inside the package, relatively.
        with open(grpc_stub, "w") as f:
            f.write(text.replace("\nimport refit_pb2 as ", "\nfrom . import refit_pb2 as "))


setup(cmdclass={"build_py": BuildWithStubs})
