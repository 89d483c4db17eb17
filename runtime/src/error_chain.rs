//! An error and its causes on one line ("error sending request: connection refused"), for
//! records a person reads later: a `Display` alone shows only the outermost error once the
//! cause is kept as `#[source]`.

/// An error kept with its causes where the variant takes several kinds (a socket's, a
/// protocol's, or a sentence of our own: `String` and `&str` convert into it).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `e`, then each of its sources, joined by `": "`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("the agent's session could not be built")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_is_kept_in_order() {
        let e = Outer(std::io::Error::other("disk full"));
        assert_eq!(
            error_chain(&e),
            "the agent's session could not be built: disk full"
        );
    }
}
