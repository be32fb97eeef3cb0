#===- AddSTPAR.cmake - thin wrappers over LLVM/MLIR's CMake helpers -------===#
#
# Keep stpar's own targets uniform: every library is an MLIR library linked
# against the shared libMLIR.so, every tool an LLVM executable.
#
#===------------------------------------------------------------------------===#

include_guard()
include(GNUInstallDirs)

# add_stpar_library(name SOURCES... [DEPENDS ...] [LINK_LIBS ...])
# The library is installed (cmake/STPARInstall.cmake) and exported as
# STPAR::name by find_package(STPAR).
function(add_stpar_library name)
  add_mlir_library(${name} ${ARGN} DISABLE_INSTALL)
  _stpar_export_library(${name})
endfunction()

# add_stpar_dialect_library(name SOURCES... [DEPENDS ...] [LINK_LIBS ...])
function(add_stpar_dialect_library name)
  set_property(GLOBAL APPEND PROPERTY STPAR_DIALECT_LIBS ${name})
  add_mlir_library(${name} ${ARGN} DISABLE_INSTALL)
  _stpar_export_library(${name})
endfunction()

function(_stpar_export_library name)
  set_property(GLOBAL APPEND PROPERTY STPAR_EXPORTED_LIBS ${name})
  target_include_directories(${name} INTERFACE
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# add_stpar_tool(name SOURCES... ) -- an executable under build/bin.
function(add_stpar_tool name)
  add_llvm_executable(${name} ${ARGN})
  llvm_update_compile_flags(${name})
endfunction()
