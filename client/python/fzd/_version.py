# The package's version: the project's (project(VERSION) in the top-level
# CMakeLists.txt).  pyproject.toml reads it from here, and the ctest
# test_python_version checks that the two agree.
__version__ = "0.2.0"
