//! Identifier and hash newtypes, so a session id is never passed where a plan hash belongs.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps `s` as it is; nothing is checked.
            pub fn new(s: impl Into<String>) -> Self {
                $name(s.into())
            }
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// One conversation with the runtime, across turns and resumes.
    SessionId
);
string_id!(
    /// Ties one model call to the tool calls it proposed, in the timeline.
    CorrelationId
);
string_id!(
    /// SHA-256 (lower-case hex) of a BoundToolPlan's canonical JSON.
    PlanHash
);

impl SessionId {
    /// A fresh random session id. Session ids never influence results, so they need no seed.
    pub fn random() -> Self {
        SessionId(uuid::Uuid::new_v4().to_string())
    }
}

/// SHA-256 of the canonical JSON of `value`: keys sorted (serde_json's map is ordered), no
/// whitespace, UTF-8.
pub fn canonical_sha256(value: &serde_json::Value) -> String {
    let text = value.to_string();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// What one model call was bound to: written with the call, so a timeline row can say exactly
/// which model and which tools produced a proposal. Only ids, so it lives here, below the
/// store, the models and the tools that all carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSnapshot {
    /// The id of the model called (`Model::id`).
    pub model_id: String,
    /// The generation of the tool plan bound to the call.
    pub plan_generation: u64,
    /// The hash of that tool plan.
    pub plan_hash: PlanHash,
    /// Ties the call to the tool calls it proposed.
    pub correlation_id: CorrelationId,
    /// The round of the turn the call was made in.
    pub round: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_hash_ignores_key_order() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b":1,"a":[1,2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{ "a": [1, 2], "b": 1 }"#).unwrap();
        assert_eq!(canonical_sha256(&a), canonical_sha256(&b));
        assert_eq!(canonical_sha256(&a).len(), 64);
    }
}
