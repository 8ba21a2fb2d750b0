# kiln's public headers: include/kiln/*.h and every kiln header they include, transitively
# (cmake/Install.cmake runs this as `cmake --install` does).
#   kiln_public_headers(SOURCE_DIR OUT): the list, as paths relative to SOURCE_DIR
#   kiln_install_public_headers(SOURCE_DIR DESTINATION): installs them under DESTINATION,
#     include/kiln/X.h as X.h and the others at their source path (lib/trainer/trainer.h)
include_guard(GLOBAL)

function(kiln_public_headers source out)
  file(GLOB pending RELATIVE ${source} ${source}/include/kiln/*.h)
  set(seen "")
  while(pending)
    list(POP_FRONT pending header)
    list(FIND seen "${header}" index)  # not IN_LIST: an install script runs with CMake's old policies
    if(NOT index EQUAL -1)
      continue()
    endif()
    list(APPEND seen ${header})
    if(NOT EXISTS ${source}/${header})
      continue()  # generated (lib/base/version.h): installed by a rule of its own
    endif()
    file(STRINGS ${source}/${header} includes
         REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](lib|components|tasks|kiln)/[^\">]*[\">]")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^\">]*)[\">].*$" "\\1" included "${line}")
      if(included MATCHES "^kiln/")
        set(included include/${included})
      endif()
      list(APPEND pending ${included})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(kiln_install_public_headers source destination)
  kiln_public_headers(${source} headers)
  foreach(header IN LISTS headers)
    if(NOT EXISTS ${source}/${header})
      continue()
    endif()
    get_filename_component(dir ${header} DIRECTORY)
    if(dir STREQUAL "include/kiln")
      set(dir "")
    endif()
    file(INSTALL ${source}/${header} DESTINATION ${destination}/${dir})
  endforeach()
endfunction()
