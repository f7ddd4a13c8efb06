"""The search engine: `measure` (how a config's time is measured), `search` (what to try), `sweeps` (problems that
differ in one dimension), and over them `tuner` (one problem in phases), `tune_result` and `fits`. More:
docs/design/engine.md.

May import: `autotuner.store` (through its interfaces), `autotuner.base`, the ground floor."""
