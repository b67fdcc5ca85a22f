// The translation unit that compiles tests/test_pch.h (tests/CMakeLists.txt).
