# pipetune_find_cuda_toolkit(<find_package arguments>): find_package(CUDAToolkit ...) that also
# works with Debian 12's CMake 3.25.1. That FindCUDAToolkit sets a DEPRECATION property on the
# target CUDA::nvToolsExt whenever the project requires CMake >= 3.25, even when the target was
# never made: CUDA 12.9 and 13 ship no nvToolsExt library (only the header-only nvtx3), so a fresh
# Debian 12 machine failed to configure ("set_property could not find TARGET CUDA::nvToolsExt").
# The module is read as a project requiring 3.24 would have it read; nothing else changes.
macro(pipetune_find_cuda_toolkit)
  set(_pipetune_required_before "${CMAKE_MINIMUM_REQUIRED_VERSION}")
  set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
  find_package(CUDAToolkit ${ARGN})
  set(CMAKE_MINIMUM_REQUIRED_VERSION "${_pipetune_required_before}")
  unset(_pipetune_required_before)
endmacro()
