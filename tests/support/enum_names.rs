//! The check behind each crate's `enum_names` test: enums that travel as text derive their
//! names with strum and their wire names with serde, and these keep the two spellings one, so
//! a renamed variant cannot drift apart. One file, included by path, because the crates share
//! no test-support crate (the crucible depends on none of the others).

#![allow(clippy::unwrap_used)]

use std::fmt::{Debug, Display};
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;
use strum::IntoEnumIterator;

/// Every variant's strum name is its serde name, its `Display`, and reads back through serde.
pub(super) fn names_agree<T>()
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
pub(super) fn parses_back<T>()
where
    T: IntoEnumIterator + FromStr + Into<&'static str> + PartialEq + Debug + Copy,
{
    for v in T::iter() {
        let name: &'static str = v.into();
        assert_eq!(name.parse::<T>().ok(), Some(v), "{name}");
    }
    assert!("no such name".parse::<T>().is_err());
}
