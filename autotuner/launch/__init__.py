"""The launch path: which config a launch uses (`lookup`: database, service, nearest, default), what the
service answers for it (`serving`), the library calls `autotuner.softmax(x)` ... (`library`), and what makes a
new process's first launch fast: kept binaries (`binary_cache`) and kept argument specializations
(`specializations`).

May import: `autotuner.store`, `autotuner.base`, the ground floor. Never the engine: a launching process does
not load the search.
"""
