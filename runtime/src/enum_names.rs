//! Enums that travel as text derive their names with strum and their wire names with serde;
//! this test keeps the two spellings one, so a renamed variant cannot drift apart.

#![allow(clippy::unwrap_used)]

use std::fmt::{Debug, Display};
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;
use strum::IntoEnumIterator;

/// Every variant's strum name is its serde name, its `Display`, and reads back through serde.
fn names_agree<T>()
where
    T: IntoEnumIterator + Serialize + DeserializeOwned + Display + Into<&'static str>,
    T: PartialEq + Debug + Copy,
{
    let mut seen = 0;
    for v in T::iter() {
        let name: &'static str = v.into();
        let json = serde_json::to_value(v).unwrap();
        assert_eq!(json, serde_json::Value::from(name), "{v:?}");
        assert_eq!(v.to_string(), name, "{v:?}");
        assert_eq!(serde_json::from_value::<T>(json).unwrap(), v, "{v:?}");
        seen += 1;
    }
    assert!(seen > 0, "an enum with no variants proves nothing");
}

/// And `FromStr` reads every name back to its variant.
fn parses_back<T>()
where
    T: IntoEnumIterator + FromStr + Into<&'static str> + PartialEq + Debug + Copy,
{
    for v in T::iter() {
        let name: &'static str = v.into();
        assert_eq!(name.parse::<T>().ok(), Some(v), "{name}");
    }
    assert!("no such name".parse::<T>().is_err());
}

#[test]
fn strum_and_serde_names_agree() {
    use crate::hooks::HookEventKind;
    use crate::model::effort::Effort;
    use crate::model::errors::ErrorClass;
    use crate::policy::{SafetyLevel, SessionMode};
    use crate::store::checkpoint::SessionStatus;
    use crate::store::receipts::{ReceiptState, ReconcileOutcome};
    use crate::store::timeline::PipelineStep;

    names_agree::<Effort>();
    parses_back::<Effort>();
    names_agree::<ErrorClass>();
    names_agree::<ReceiptState>();
    parses_back::<ReceiptState>();
    names_agree::<ReconcileOutcome>();
    parses_back::<ReconcileOutcome>();
    names_agree::<SessionStatus>();
    parses_back::<SessionStatus>();
    names_agree::<SafetyLevel>();
    parses_back::<SafetyLevel>();
    names_agree::<SessionMode>();
    parses_back::<SessionMode>();
    names_agree::<HookEventKind>();
    parses_back::<HookEventKind>();
    names_agree::<PipelineStep>();
    parses_back::<PipelineStep>();
}
