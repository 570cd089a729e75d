"""UNREAL Explorer's studies: one module per experiment, above the library (they import ``unreal_demo``; the
library never imports them). Run one as ``python -m experiments NAME …`` (``python -m experiments`` lists them);
each module's docstring gives its commands, the records it writes and the docs/RESULTS.md section reporting it.
"""
