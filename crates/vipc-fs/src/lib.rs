//! vipc-fs: the V file server (page-level file access over Send/Receive/Reply).
