#===- AddSTPAR.cmake - thin wrappers over LLVM/MLIR's CMake helpers -------===#
#
# Keep stpar's own targets uniform: every library is an MLIR library linked
# against the shared libMLIR.so, every tool an LLVM executable.
#
#===------------------------------------------------------------------------===#

include_guard()

# add_stpar_library(name SOURCES... [DEPENDS ...] [LINK_LIBS ...])
function(add_stpar_library name)
  add_mlir_library(${name} ${ARGN} DISABLE_INSTALL)
endfunction()

# add_stpar_dialect_library(name SOURCES... [DEPENDS ...] [LINK_LIBS ...])
function(add_stpar_dialect_library name)
  set_property(GLOBAL APPEND PROPERTY STPAR_DIALECT_LIBS ${name})
  add_mlir_library(${name} ${ARGN} DISABLE_INSTALL)
endfunction()

# add_stpar_tool(name SOURCES... ) -- an executable under build/bin.
function(add_stpar_tool name)
  add_llvm_executable(${name} ${ARGN})
  llvm_update_compile_flags(${name})
endfunction()
