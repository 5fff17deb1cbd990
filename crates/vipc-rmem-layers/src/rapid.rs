//! RAPID-style RPC (placeholder).
