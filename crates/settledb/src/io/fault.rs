//! Fault-injecting in-memory file system (contract skeleton).
