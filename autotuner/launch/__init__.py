"""The launch path: which config a launch uses (`lookup`: autotuner.store.resolution's steps over the database
and the service), what the
service answers for it (`serving`), the library calls `autotuner.softmax(x)` ... (`library`), and what makes a
new process's first launch fast: kept binaries (`binary_cache`) and kept argument specializations
(`specializations`).

May import: `autotuner.store`, `autotuner.base`, the ground floor. Never the engine: a launching process does
not load the search.
"""
