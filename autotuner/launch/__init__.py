"""The launch path: which config a launch uses (`lookup`), what the service answers (`serving`), the library calls
(`library`), and kept binaries and specializations for a fast first launch. More: docs/design/launch.md.

May import: `autotuner.store`, `autotuner.base`, the ground floor. Never the engine: a launching process does not load
the search."""
