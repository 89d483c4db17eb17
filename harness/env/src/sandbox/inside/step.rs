//! A set-up step's result inside the sandbox: its error is the text a person reads, what was
//! being done and why it failed. Below the set-up and the root file system it builds.

/// A step's result; the error says what was being done.
pub(super) type SetupResult<T> = Result<T, String>;

/// `r`, its error prefixed with what was being done.
pub(super) fn ctx<T, E: std::fmt::Display>(
    r: Result<T, E>,
    what: impl FnOnce() -> String,
) -> SetupResult<T> {
    r.map_err(|e| format!("{}: {e}", what()))
}
