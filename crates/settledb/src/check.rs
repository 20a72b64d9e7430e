//! Verifier (to be written).
