# kiln_add_plugin(NAME SOURCES src... [CONFIGS dir] [LINK targets...] [INSTALL])
#
# Builds a kiln plugin: a shared library (lib<NAME>.so) linked against kiln's libraries. With
# CONFIGS, the folder of configs is copied next to the library as <NAME>-configs/ and the
# plugin's KILN_PLUGIN_CONFIG_DIR names it, so kiln adds it to the config search path
# (`model=my_net` then finds CONFIGS/model/my_net.yaml). With INSTALL, `cmake --install` puts
# both in <prefix>/lib/kiln/plugins, where `plugins: [NAME]` finds them.
# Used by kiln's own plugins/ and, through find_package(Kiln), by out-of-tree plugins.
function(kiln_add_plugin name)
  cmake_parse_arguments(ARG "INSTALL" "CONFIGS" "SOURCES;LINK" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kiln_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Kiln::tasks ${ARG_LINK})
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_CONFIGS)
    get_filename_component(configs "${ARG_CONFIGS}" ABSOLUTE)
    if(NOT IS_DIRECTORY "${configs}")
      message(FATAL_ERROR "kiln_add_plugin(${name}): CONFIGS ${ARG_CONFIGS} is not a folder")
    endif()
    target_compile_definitions(${name} PRIVATE KILN_PLUGIN_CONFIG_DIR="${name}-configs")
    # Copied again whenever a config file changes, not only when the library relinks.
    file(GLOB_RECURSE config_files CONFIGURE_DEPENDS "${configs}/*")
    set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${name}-configs.stamp")
    add_custom_command(OUTPUT "${stamp}"
      COMMAND ${CMAKE_COMMAND} -E rm -rf "$<TARGET_FILE_DIR:${name}>/${name}-configs"
      COMMAND ${CMAKE_COMMAND} -E copy_directory "${configs}" "$<TARGET_FILE_DIR:${name}>/${name}-configs"
      COMMAND ${CMAKE_COMMAND} -E touch "${stamp}"
      DEPENDS ${config_files}
      VERBATIM)
    add_custom_target(${name}_configs DEPENDS "${stamp}")
    add_dependencies(${name} ${name}_configs)
  endif()
  if(ARG_INSTALL)
    install(TARGETS ${name} LIBRARY DESTINATION lib/kiln/plugins)
    if(ARG_CONFIGS)
      install(DIRECTORY "${configs}/" DESTINATION "lib/kiln/plugins/${name}-configs")
    endif()
  endif()
endfunction()
