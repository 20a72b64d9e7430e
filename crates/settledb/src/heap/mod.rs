//! The heap access method.
pub mod tuple;
