# `cmake --install build --prefix DIR` gives a relocatable kiln:
#   DIR/bin/kiln, DIR/lib/libkiln_*.so (RPATH $ORIGIN/../lib), DIR/include/kiln/*.h (public) and
#   DIR/include/kiln/{lib,components,tasks}/ (what they include),
#   DIR/share/kiln/configs/, DIR/lib/cmake/Kiln/ (find_package(Kiln)), DIR/lib/kiln/plugins/.
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR lib/cmake/Kiln)
set(kiln_targets kiln kiln_base kiln_config kiln_core)
if(Torch_FOUND)
  list(APPEND kiln_targets kiln_engine kiln_components kiln_tasks)
endif()
# Exported as Kiln::base, Kiln::config, Kiln::core, Kiln::engine, Kiln::components, Kiln::tasks (the same
# names the tree's ALIAS targets use, so plugins and examples build in and out of the tree).
foreach(target ${kiln_targets})
  if(NOT target STREQUAL "kiln")
    string(REPLACE "kiln_" "" export_name ${target})
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  endif()
endforeach()
install(TARGETS ${kiln_targets} EXPORT KilnTargets
  RUNTIME DESTINATION bin
  LIBRARY DESTINATION lib
  ARCHIVE DESTINATION lib)
install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
# The libraries `kiln dashboard` and `kiln serve` load, and kiln's CUDA module (kiln_engine loads
# it where there is a GPU); nothing links them, so they are not exported.
if(TARGET kiln_cuda)
  install(TARGETS kiln_cuda LIBRARY DESTINATION lib)
endif()
if(TARGET kiln_dashboard)
  install(TARGETS kiln_dashboard LIBRARY DESTINATION lib)
endif()
if(TARGET kiln_serve)
  install(TARGETS kiln_serve LIBRARY DESTINATION lib)
endif()

# The public headers: include/kiln/*.h, included as <kiln/trainer.h>, and the headers they include,
# transitively, keeping their source layout under include/kiln/ ("lib/trainer/trainer.h"). Nothing
# else is installed: a header is public because the face includes it, not because it is in the
# tree (no `internal/` header is: abseil's rule). The closure is taken as `cmake --install` runs
# (cmake/PublicHeaders.cmake), so it follows the sources without a reconfigure.
# tests/install/public_headers.txt holds the list the install test expects: a header that becomes
# public through an include added to a public one fails the test until the list says so.
install(CODE "include(${CMAKE_SOURCE_DIR}/cmake/PublicHeaders.cmake)
kiln_install_public_headers(\"${CMAKE_SOURCE_DIR}\" \"\${CMAKE_INSTALL_PREFIX}/include/kiln\")")
install(FILES ${KILN_GENERATED_INCLUDE}/lib/base/version.h DESTINATION include/kiln/lib/base)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/configs/ DESTINATION share/kiln/configs)

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/KilnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/KilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/KilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/KilnConfig.cmake ${CMAKE_BINARY_DIR}/KilnConfigVersion.cmake
              ${CMAKE_SOURCE_DIR}/cmake/KilnPlugin.cmake ${CMAKE_SOURCE_DIR}/cmake/KilnTorch.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})
