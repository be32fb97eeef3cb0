# -*- Python -*-
# lit configuration for stpar's regression tests (FileCheck-based).

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "STPAR"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.stpar_obj_root, "test")
# test/Unit is its own suite (GoogleTest format).
config.excludes = ["Inputs", "Unit", "CMakeLists.txt", "README.md",
                   "lit.cfg.py", "lit.site.cfg.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%stpar_src_root", config.stpar_src_root))
config.substitutions.append(("%stpar_obj_root", config.stpar_obj_root))
config.substitutions.append(("%shared", config.shared_dir))
config.substitutions.append(("%python", "/usr/bin/python3"))

# stpar verify's reference runner (tools/ort-run, docs/verify.md): Node.js
# with onnxruntime-node, installed by scripts/install-deps.sh into
# <root>/.deps/node. Tests using it are not gated: without it they fail with
# the runner's message naming the install script.
import shutil
node = shutil.which("node") or "node"
config.substitutions.append(("%node", node))
config.substitutions.append(
    ("%ort-run", node + " " + os.path.join(config.stpar_src_root, "tools",
                                          "ort-run", "ort-run.js")))
if not os.path.exists(os.path.join(config.stpar_src_root, ".deps", "node",
                                   "node_modules", "onnxruntime-node")):
    lit_config.warning("onnxruntime-node is not installed in .deps/node; the "
                       "test/Verify tests will fail (run scripts/install-deps.sh)")

# stpar emit --target cuda (docs/emitted-code.md): the emitted programs are
# compiled and linked with nvcc against NCCL, cuBLAS and MPI, in two steps
# so that ccache caches the compile (test/nvcc-program.py); those tests
# REQUIRE the `cuda` feature and are UNSUPPORTED without /usr/local/cuda.
cuda_root = "/usr/local/cuda"
if os.path.exists(os.path.join(cuda_root, "bin", "nvcc")) and shutil.which("mpicxx"):
    import subprocess
    def mpi_flags(kind):
        return subprocess.run(["mpicxx", "--showme:" + kind], capture_output=True,
                              text=True).stdout.strip()
    config.available_features.add("cuda")
    config.substitutions.append(
        ("%nvcc-program",
         "/usr/bin/python3 %s %s/bin/nvcc -std=c++17 -arch=sm_90 %s -L%s/lib "
         "-L%s/lib64 -lcublas -lnccl %s"
         % (os.path.join(config.stpar_src_root, "test", "nvcc-program.py"),
            cuda_root, mpi_flags("compile"), cuda_root, cuda_root,
            mpi_flags("link"))))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

if config.enable_sanitizers in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("sanitizers")
    # Leaks in upstream libraries are not ours to fix; everything else fails.
    # LLVM's allocators poison memory from inlined (instrumented) header code
    # that the uninstrumented libMLIR*.a code then legitimately reuses, so
    # manual poisoning is switched off.
    config.environment["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:allow_user_poisoning=0"
    config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"

# The slow matrices (every model x plan kind x rank shape of the training
# step, and their cuda compiles) run only with `--param full=1`, which the
# target check-stpar-full passes (docs/building.md); check-stpar runs a
# representative subset of each.
if lit_config.params.get("full", "0") not in ("0", "", "OFF", "off"):
    config.available_features.add("full-matrices")

# The plugin for stock mlir-opt-22 (not built with sanitizers: an
# uninstrumented mlir-opt cannot load an instrumented plugin).
plugin = os.path.join(config.stpar_obj_root, "lib", "STPARPlugin.so")
if os.path.exists(plugin):
    config.available_features.add("stpar-plugin")
config.substitutions.append(("%stpar_plugin", plugin))
config.substitutions.append(
    ("%mlir-opt-22", os.path.join(config.llvm_tools_dir, "mlir-opt")))

tool_dirs = [config.stpar_tools_dir, config.llvm_tools_dir]
tools = ["stpar", "stpar-opt", "stpar-translate", "stpar-bench-search",
         "stpar-bench-moe",
         "FileCheck", "not", "count"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
