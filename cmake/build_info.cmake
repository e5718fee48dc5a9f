# Run at every build (cmake -P): writes OUT from TEMPLATE with the version, the
# commit the sources are at, and the CUDA setting, rewriting it only when that
# changed, so that `ntransformer --version` names what was built.
#   -DSOURCE_DIR= -DTEMPLATE= -DOUT= -DNT_VERSION= -DNT_CUDA_BUILT=
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE NT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE status ERROR_QUIET)
if(NOT status EQUAL 0 OR NT_COMMIT STREQUAL "")
  set(NT_COMMIT "unknown (not built from a git checkout)")
endif()
configure_file("${TEMPLATE}" "${OUT}" @ONLY)
