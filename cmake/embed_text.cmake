# Writes a C++ source that defines `extern const std::string_view SYMBOL` in
# namespace NAMESPACE holding the bytes of INPUT exactly (any byte allowed).
# Run at build time: cmake -DINPUT=... -DOUTPUT=... -DSYMBOL=... -DNAMESPACE=... -P embed_text.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} at build time; do not edit.\n"
  "#include <string_view>\n\n"
  "namespace ${NAMESPACE} {\n"
  "namespace {\n"
  "constexpr char ${SYMBOL}Bytes[] = {${bytes}'\\0'};\n"
  "}  // namespace\n"
  "extern const std::string_view ${SYMBOL};\n"
  "const std::string_view ${SYMBOL}{${SYMBOL}Bytes, ${size}};\n"
  "}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
