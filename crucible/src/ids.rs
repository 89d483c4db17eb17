//! Identifier and digest newtypes, so a pack hash is never passed where a scaffold hash belongs.
//!
//! Every digest is a SHA-256 written as 64 lower-case hex characters. Parsing refuses anything
//! else (upper case included), because two spellings of one digest would give one contract two
//! hashes.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A digest string that is not 64 lower-case hex characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SHA-256 digest {0:?}: expected 64 lower-case hex characters")]
pub struct DigestParseError(pub String);

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

macro_rules! digest_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Parses a digest written as 64 lower-case hex characters.
            pub fn parse(s: &str) -> Result<Self, DigestParseError> {
                if is_sha256_hex(s) {
                    Ok($name(s.to_owned()))
                } else {
                    Err(DigestParseError(s.to_owned()))
                }
            }

            /// Wraps raw SHA-256 output.
            pub fn from_digest(bytes: [u8; 32]) -> Self {
                $name(hex::encode(bytes))
            }

            /// SHA-256 of `bytes`, for tests and for callers that hash whole files.
            pub fn of_bytes(bytes: &[u8]) -> Self {
                Self::from_digest(Sha256::digest(bytes).into())
            }

            /// The 64 lower-case hex characters.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The 32 digest bytes (the hex was validated at construction).
            pub fn to_bytes(&self) -> [u8; 32] {
                let mut out = [0u8; 32];
                // Invariant: `self.0` is 64 validated hex characters, so decoding cannot fail.
                if hex::decode_to_slice(&self.0, &mut out).is_err() {
                    unreachable!("digest newtypes hold validated hex");
                }
                out
            }
        }

        impl TryFrom<String> for $name {
            type Error = DigestParseError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                if is_sha256_hex(&s) { Ok($name(s)) } else { Err(DigestParseError(s)) }
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

digest_id!(
    /// SHA-256 of a contract's canonical JSON: what every later step checks and every verdict names.
    ContractHash
);
digest_id!(
    /// SHA-256 of the canonical JSON of the trial table (trials sorted by task, trial, arm).
    EvidenceHash
);
digest_id!(
    /// Task-pack hash (computed by the harness over ordered task hashes plus trials per task).
    PackHash
);
digest_id!(
    /// Hash of an arm's scaffold (prompts, policies, tool hints ...), computed by the harness.
    ScaffoldHash
);
digest_id!(
    /// Hash of the grader configuration (verifiers, rubrics, judges and their versions).
    GraderHash
);
digest_id!(
    /// Public commitment to a sealed pack: SHA-256 over the sealed blob and the plaintext pack hash.
    Commitment
);

/// A task's id inside its pack (Harbor task folder name). Not a content hash: the harness checks
/// content through the pack hash.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

/// A task family (a group of related tasks, counted by the gate's `min_families`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FamilyId(String);

macro_rules! string_id_impls {
    ($name:ident) => {
        impl $name {
            /// Wraps any string; no check is made.
            pub fn new(s: impl Into<String>) -> Self {
                $name(s.into())
            }
            /// The id as written.
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
string_id_impls!(TaskId);
string_id_impls!(FamilyId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_parse_refuses_upper_case_and_wrong_length() {
        let good = "a".repeat(64);
        assert!(PackHash::parse(&good).is_ok());
        assert!(PackHash::parse(&"A".repeat(64)).is_err());
        assert!(PackHash::parse(&"a".repeat(63)).is_err());
        assert!(serde_json::from_str::<PackHash>("\"xyz\"").is_err());
    }

    #[test]
    fn digest_bytes_round_trip() {
        let h = ContractHash::of_bytes(b"geode");
        assert_eq!(ContractHash::from_digest(h.to_bytes()), h);
    }
}
