//! The log, in the two formats `pinhook serve` writes: [`fields`] (a text line's fields as
//! tracing writes them, cheaper), [`line`] (the warm review's summary line written straight,
//! and the text format it copies), [`json`] (the JSON format, escaping what JSON leaves raw)
//! and [`writer`] (the one writer thread every line is queued to). What is escaped in a line
//! is [`crate::text`]'s.

pub mod fields;
pub mod json;
pub mod line;
pub mod writer;
