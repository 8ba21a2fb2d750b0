# Shared by the embedding scripts (EmbedConfigs.cmake, EmbedText.cmake), which run as cmake -P.

# Fails when `contents` (read from `name`) holds the raw string's closing delimiter )<delimiter>".
function(kiln_embed_check_delimiter contents delimiter name)
  string(FIND "${contents}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${name} contains the raw-string delimiter )${delimiter}\"")
  endif()
endfunction()

# Writes `text` to `output` only when it changed, so an unchanged tree rebuilds nothing.
function(kiln_write_if_changed output text)
  if(EXISTS ${output})
    file(READ ${output} old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE ${output} "${text}")
endfunction()
