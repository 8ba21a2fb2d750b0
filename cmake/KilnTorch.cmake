# LibTorch from the project's virtual environment: PyPI's torch wheel (scripts/setup_venv.sh), at
# the version pinned in scripts/python/torch.txt. Sets Torch_FOUND, Torch_VERSION, TORCH_LIBRARIES,
# TORCH_INCLUDE_DIRS, KILN_TORCH_DIR, KILN_WITH_CUDA and, with CUDA, KILN_TORCH_CUDA_LIBRARIES.
#
#   KILN_TORCH_DIR  the wheel's torch/ folder (default: .venv's site-packages/torch)
#   KILN_CUDA       AUTO (default): CUDA when CUDA's toolkit is found; ON; OFF
#
# TORCH_LIBRARIES is LibTorch's CPU libraries alone (libtorch_cpu and libc10; a CPU machine needs
# none of the CUDA libraries but the runtime and CUPTI that libtorch_cpu itself links). With CUDA,
# the wheel's own TorchConfig.cmake (which needs the toolkit) gives KILN_TORCH_CUDA_LIBRARIES
# (torch, torch_cuda, c10_cuda), which only kiln's CUDA module links.
# Also included by the installed KilnConfig.cmake, with KILN_TORCH_DIR and KILN_CUDA recorded.
include_guard(GLOBAL)

set(KILN_CUDA AUTO CACHE STRING "Build with CUDA: AUTO (when CUDA's toolkit is found), ON or OFF")
set_property(CACHE KILN_CUDA PROPERTY STRINGS AUTO ON OFF)

# Under `pip install .` (scikit-build-core sets SKBUILD and Python_EXECUTABLE): the torch of the
# environment being installed into, whose libraries the package will load.
if(NOT KILN_TORCH_DIR AND SKBUILD AND Python_EXECUTABLE)
  execute_process(COMMAND ${Python_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _purelib OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND EXISTS ${_purelib}/torch/version.py)
    set(KILN_TORCH_DIR ${_purelib}/torch CACHE PATH "LibTorch: the torch wheel's folder in the virtual environment")
  endif()
endif()
if(NOT KILN_TORCH_DIR)
  if(DEFINED ENV{KILN_VENV})
    set(_venv $ENV{KILN_VENV})
  else()
    set(_venv ${CMAKE_CURRENT_LIST_DIR}/../.venv)
  endif()
  file(GLOB _candidates LIST_DIRECTORIES true ${_venv}/lib/python3*/site-packages/torch)
  list(LENGTH _candidates _n)
  if(_n GREATER 0)
    list(GET _candidates 0 _found)
    get_filename_component(_found ${_found} ABSOLUTE)
    set(KILN_TORCH_DIR ${_found} CACHE PATH "LibTorch: the torch wheel's folder in the virtual environment")
  endif()
endif()

# kiln's Python: the virtual environment's (the tests' interop checks, the Optuna sweeper's default).
set(KILN_PYTHON python3)
if(SKBUILD AND Python_EXECUTABLE)
  set(KILN_PYTHON ${Python_EXECUTABLE})
elseif(KILN_TORCH_DIR AND EXISTS ${KILN_TORCH_DIR}/../../../../bin/python)
  get_filename_component(KILN_PYTHON ${KILN_TORCH_DIR}/../../../../bin/python ABSOLUTE)
endif()

set(Torch_FOUND FALSE)
set(KILN_WITH_CUDA OFF)
if(NOT KILN_TORCH_DIR OR NOT EXISTS ${KILN_TORCH_DIR}/version.py)
  message(WARNING "kiln: LibTorch not found (no torch in the virtual environment .venv): building the "
                  "config library and CLI only. Run scripts/setup.sh, which installs it.")
  return()
endif()

# The pinned version, and the one in the folder.
# (The installed KilnConfig.cmake sets KILN_TORCH_PIN to the version kiln was built with.)
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/../scripts/python/torch.txt)
  file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../scripts/python/torch.txt _pin REGEX "^torch==")
  string(REPLACE "torch==" "" KILN_TORCH_PIN "${_pin}")
endif()
file(STRINGS ${KILN_TORCH_DIR}/version.py _line REGEX "^__version__")
string(REGEX REPLACE "^__version__ = '([0-9.]+).*$" "\\1" Torch_VERSION "${_line}")
if(KILN_TORCH_PIN AND NOT Torch_VERSION STREQUAL KILN_TORCH_PIN)
  message(FATAL_ERROR "kiln: ${KILN_TORCH_DIR} holds torch ${Torch_VERSION}, kiln is pinned to "
                      "${KILN_TORCH_PIN}: run scripts/setup.sh (it installs ${KILN_TORCH_PIN})")
endif()

if(NOT KILN_CUDA STREQUAL "OFF" AND EXISTS ${KILN_TORCH_DIR}/lib/libtorch_cuda.so)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(KILN_WITH_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "kiln: KILN_CUDA=ON but CUDA's toolkit was not found (nvcc, libcudart): install "
                        "it or configure with -DKILN_CUDA=OFF")
  endif()
elseif(KILN_CUDA STREQUAL "ON")
  message(FATAL_ERROR "kiln: KILN_CUDA=ON but ${KILN_TORCH_DIR} is a CPU-only torch")
endif()

set(TORCH_INCLUDE_DIRS ${KILN_TORCH_DIR}/include ${KILN_TORCH_DIR}/include/torch/csrc/api/include)
if(KILN_WITH_CUDA)
  # The wheel's TorchConfig.cmake warns when the toolkit's nvToolsExt (gone since CUDA 12.9) is
  # missing and about the static CUDA libraries it does not use; nothing kiln needs.
  # CUDA code kiln compiles targets the GPUs it is run on: Ampere, Hopper, Blackwell.
  if(NOT TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0;10.0;12.0")
  endif()
  # TorchConfig looks for Caffe2Config and its libraries (c10, torch, kineto) with PATHS, which CMake
  # searches after the system's folders: a LibTorch installed system-wide (Debian's libtorch-dev)
  # would win and mix its libraries in. Name the wheel's, and search no system folder meanwhile.
  set(Caffe2_DIR ${KILN_TORCH_DIR}/share/cmake/Caffe2 CACHE PATH "the torch wheel's Caffe2 config" FORCE)
  set(c10_LIBRARY ${KILN_TORCH_DIR}/lib/libc10.so CACHE FILEPATH "the torch wheel's libc10" FORCE)
  set(TORCH_LIBRARY ${KILN_TORCH_DIR}/lib/libtorch.so CACHE FILEPATH "the torch wheel's libtorch" FORCE)
  set(C10_CUDA_LIBRARY ${KILN_TORCH_DIR}/lib/libc10_cuda.so CACHE FILEPATH "the torch wheel's libc10_cuda" FORCE)
  set(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH FALSE)
  find_package(Torch REQUIRED CONFIG PATHS ${KILN_TORCH_DIR}/share/cmake/Torch NO_DEFAULT_PATH)
  unset(CMAKE_FIND_USE_CMAKE_SYSTEM_PATH)
endif()
# kiln's libraries, programs and tests link LibTorch's CPU libraries alone, with and without CUDA:
# kiln's CUDA code is a module of its own, libkiln_cuda (lib/trainer/internal/cuda_module.h), which
# links the whole of LibTorch (KILN_TORCH_CUDA_LIBRARIES) and is loaded where a GPU can be used.
# Loading LibTorch's CUDA libraries costs a process 0.2-0.4 s of start-up on any machine.
if(NOT TARGET kiln_torch_cpu)
  add_library(kiln_torch_cpu INTERFACE IMPORTED)
  set_target_properties(kiln_torch_cpu PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    # What the wheel's torch_cpu target declares (c10d with Gloo is in libtorch_cpu).
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=1;USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE"
    INTERFACE_LINK_LIBRARIES "${KILN_TORCH_DIR}/lib/libtorch_cpu.so;${KILN_TORCH_DIR}/lib/libc10.so")
endif()
if(KILN_WITH_CUDA)
  set(KILN_TORCH_CUDA_LIBRARIES ${TORCH_LIBRARIES})
endif()
set(TORCH_LIBRARIES kiln_torch_cpu)
set(Torch_FOUND TRUE)
message(STATUS "kiln: LibTorch ${Torch_VERSION} from ${KILN_TORCH_DIR} (CUDA: ${KILN_WITH_CUDA})")
