//! `/resume` without an id, and with a number or an id prefix: the sessions a connection may
//! switch to, and which one an argument means. Both come from one list, the one the client was
//! shown, so `/resume 2` after a listing resumes its second line.

use super::SessionFactory;
use super::protocol::{ServerMessage, SessionEntry};
use crate::ids::SessionId;

/// How many sessions `/resume` offers.
const LISTED: usize = 20;

/// The sessions one may switch to from `live`: the factory's most recent, `live` left out
/// (resuming the session one is in has nothing to restore). `None`: the factory keeps no list.
pub(super) fn resumable(
    factory: &dyn SessionFactory,
    live: &SessionId,
) -> Option<Vec<SessionEntry>> {
    let mut listed = factory.recent_sessions(LISTED + 1)?;
    listed.retain(|e| &e.session_id != live);
    listed.truncate(LISTED);
    Some(listed)
}

/// The answer to `/resume` without an id.
pub(super) fn listing(factory: &dyn SessionFactory, live: &SessionId) -> ServerMessage {
    match resumable(factory, live) {
        Some(sessions) => ServerMessage::Sessions { sessions },
        None => ServerMessage::CommandResult {
            name: "resume".into(),
            text: "no session list here: /resume SESSION_ID".into(),
        },
    }
}

/// The session `/resume ARG` means: a listed session of that id; else the Nth listed for a
/// number N; else the one listed session whose id starts with ARG; else ARG as a whole id (an
/// older session's, or one the store will say it does not know). An error names what is wrong.
pub(super) fn resolve(arg: &str, listed: &[SessionEntry]) -> Result<SessionId, String> {
    if let Some(e) = listed.iter().find(|e| e.session_id.as_str() == arg) {
        return Ok(e.session_id.clone());
    }
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) {
        return match arg.parse::<usize>() {
            Ok(n) if (1..=listed.len()).contains(&n) => Ok(listed[n - 1].session_id.clone()),
            _ if listed.is_empty() => Err(format!("no session {arg}: none to resume")),
            _ => Err(format!(
                "no session {arg}: /resume lists 1 to {}",
                listed.len()
            )),
        };
    }
    let matches: Vec<&SessionEntry> = listed
        .iter()
        .filter(|e| e.session_id.as_str().starts_with(arg))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.session_id.clone()),
        [] => Ok(SessionId::new(arg)),
        many => Err(format!(
            "{arg:?} starts {} sessions' ids: {}",
            many.len(),
            many.iter()
                .map(|e| e.session_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn entry(id: &str) -> SessionEntry {
        SessionEntry {
            session_id: SessionId::new(id),
            title: format!("about {id}"),
            updated_at: "2026-01-01T00:00:00Z".into(),
            turns: 1,
            model: "nop".into(),
            cost_usd: 0.0,
            cwd: "/work/project".into(),
        }
    }

    #[test]
    fn a_number_a_prefix_or_a_whole_id_names_a_session() {
        let listed = [entry("ab12"), entry("ab34"), entry("7"), entry("cd56")];
        let id = |arg| resolve(arg, &listed).map(|s| s.as_str().to_string());
        assert_eq!(id("2").unwrap(), "ab34");
        assert_eq!(id("4").unwrap(), "cd56");
        // A listed id wins over the number it spells.
        assert_eq!(id("7").unwrap(), "7");
        assert_eq!(id("cd").unwrap(), "cd56");
        assert_eq!(id("ab3").unwrap(), "ab34");
        // Not listed: a whole id, for the store to find or refuse.
        assert_eq!(id("older-one").unwrap(), "older-one");
        let err = id("ab").unwrap_err();
        assert!(err.contains("ab12, ab34"), "{err}");
        let err = id("5").unwrap_err();
        assert!(err.contains("1 to 4"), "{err}");
        let err = id("0").unwrap_err();
        assert!(err.contains("1 to 4"), "{err}");
        assert!(resolve("1", &[]).unwrap_err().contains("none to resume"));
    }

    struct Listing(Vec<SessionEntry>);

    impl SessionFactory for Listing {
        fn new_session(&self) -> Result<crate::session::SessionConfig, super::super::ServerError> {
            Err(super::super::ServerError::Setup("not here".into()))
        }
        fn resume(
            &self,
            _: &SessionId,
        ) -> Result<crate::session::SessionConfig, super::super::ServerError> {
            Err(super::super::ServerError::Setup("not here".into()))
        }
        fn recent_sessions(&self, limit: usize) -> Option<Vec<SessionEntry>> {
            Some(self.0.iter().take(limit).cloned().collect())
        }
    }

    #[test]
    fn the_listing_leaves_out_the_live_session() {
        let factory = Listing(vec![entry("live"), entry("a"), entry("b")]);
        let ServerMessage::Sessions { sessions } = listing(&factory, &SessionId::new("live"))
        else {
            panic!("no list")
        };
        let ids: Vec<&str> = sessions.iter().map(|e| e.session_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }
}
