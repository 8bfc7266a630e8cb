# Included into llama.cpp's own project while llama-cpp-python builds it (make setup
# passes -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>): build only what the Python
# bindings load, libllama and ggml. llama-cpp-python forces llama.cpp's common library
# ON (a cache value set with FORCE, which -DLLAMA_BUILD_COMMON=OFF cannot beat); it is
# the argument parser, chat templates and model downloader (cpp-httplib) of llama.cpp's
# own programs, and nothing in the wheel links it. A normal variable set here shadows
# the cache value for llama.cpp's directory, so common and cpp-httplib are not compiled.
set(LLAMA_BUILD_COMMON OFF)
