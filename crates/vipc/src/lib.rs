//! vipc runtime (under construction).
