"""Builds the torchneuron extension with CMake against the installed torch.

Install with `pip install -e . --no-build-isolation` so that pip builds against
the torch already in the environment instead of fetching another one.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = ROOT / "build" / "ext"
        build_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        if subprocess.call(["which", "ccache"], stdout=subprocess.DEVNULL) == 0:
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.check_call(configure, env=env)
        jobs = os.environ.get("TORCHNEURON_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "torchneuron_C", "-j", jobs],
            env=env)
        # The module lands in build/ext/lib; setuptools wants it at out_dir.
        built = next((build_dir / "lib").glob("_C*.so"))
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, out_dir / Path(self.get_ext_fullpath(ext.name)).name)


setup(
    name="torchneuron",
    version="0.1.0",
    description="A native PyTorch backend for Neuron-style accelerators, with a software NeuronCore",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[CMakeExtension("torchneuron._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    entry_points={
        # Autoload: `import torch` imports torchneuron (TORCH_DEVICE_BACKEND_AUTOLOAD=0 disables).
        "torch.backends": ["torchneuron = torchneuron._autoload:load"],
        # torch.compile(backend="neuron"), found by Dynamo without `import torchneuron`.
        "torch_dynamo_backends": ["neuron = torchneuron.compile.backend:neuron"],
    },
    zip_safe=False,
)
