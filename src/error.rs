//! Error reporting shared by the library and the binary: the one-line chain printer.
//!
//! Every error type in pinhook puts its cause in `#[source]` and does not repeat it in its own
//! message (or interpolates a detail and keeps no source), so walking `source()` prints each
//! cause once. Which HTTP status and metric label an error gets is decided in one place,
//! [`crate::admission::Failure`]. This module depends on nothing else in the crate.

/// `error: cause: cause`, the way operators read it in one line. A cause whose text the line
/// already holds is skipped (errors from other crates sometimes repeat their source).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn each_cause_once_on_one_line() {
        let error = Outer(Inner(std::io::Error::other("disk on fire")));
        assert_eq!(error_chain(&error), "outer: inner: disk on fire");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped: {0}")]
        struct Repeats(#[source] std::io::Error);
        let error = Repeats(std::io::Error::other("boom"));
        assert_eq!(error_chain(&error), "wrapped: boom");
    }
}
