//! Deterministic simulation of vipc engines (under construction).
