"""Declared tuning spaces, one file per op: parameters, device-derived constraints, problem types, defaults."""
