# pipetune_library_soname(<out-var> <library file>): the SONAME a shared library declares
# (objdump -p), for the libraries pipetune opens with dlopen at first use instead of linking
# (engine/tensor/shared_library.hpp). Fails configure when it cannot be read: a load at run time
# would otherwise fail far from the cause.
function(pipetune_library_soname out library)
  get_filename_component(_real "${library}" REALPATH)
  if(NOT CMAKE_OBJDUMP)
    find_program(CMAKE_OBJDUMP objdump)
  endif()
  execute_process(COMMAND "${CMAKE_OBJDUMP}" -p "${_real}" OUTPUT_VARIABLE _dump
                  RESULT_VARIABLE _rc ERROR_QUIET)
  string(REGEX MATCH "SONAME +([^ \n]+)" _match "${_dump}")
  if(NOT _rc EQUAL 0 OR NOT CMAKE_MATCH_1)
    message(FATAL_ERROR "cannot read the SONAME of ${library} (${CMAKE_OBJDUMP} -p, binutils)")
  endif()
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# pipetune_loaded_library(<target> <MACRO_PREFIX> <library file>): defines <prefix>_PATH (the
# library's directory and soname, the file configure found) and <prefix>_SONAME on <target>.
function(pipetune_loaded_library target prefix library)
  pipetune_library_soname(_soname "${library}")
  get_filename_component(_dir "${library}" DIRECTORY)
  target_compile_definitions(${target} PRIVATE ${prefix}_PATH="${_dir}/${_soname}"
                                               ${prefix}_SONAME="${_soname}")
endfunction()
