//! vipc benchmark suites (under construction).
