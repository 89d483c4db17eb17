//! Enums of this crate that travel as text: their strum and serde names are one.

#[path = "../../tests/support/enum_names.rs"]
mod check;

use check::{names_agree, parses_back};

#[test]
fn strum_and_serde_names_agree() {
    use crate::contract::LowerBoundMethod;
    use crate::verdict::{Degeneracy, Verdict};

    names_agree::<Verdict>();
    parses_back::<Verdict>();
    names_agree::<Degeneracy>();
    parses_back::<Degeneracy>();
    names_agree::<LowerBoundMethod>();
    parses_back::<LowerBoundMethod>();
}
