"""Helpers the tests share: stand-ins, probes and backends that are test code, not product."""
