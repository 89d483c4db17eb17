//! Enums of this crate that travel as text: their strum and serde names are one.

#[path = "../../tests/support/enum_names.rs"]
mod check;

use check::{names_agree, parses_back};

#[test]
fn strum_and_serde_names_agree() {
    use crate::grade::CheckStatus;
    use crate::integrity::IntegrityKind;
    use crate::outcome::TrialOutcome;
    use crate::parsers::ReportFormat;
    use crate::validity::TaskFlag;

    names_agree::<IntegrityKind>();
    parses_back::<IntegrityKind>();
    names_agree::<CheckStatus>();
    parses_back::<CheckStatus>();
    names_agree::<TrialOutcome>();
    parses_back::<TrialOutcome>();
    names_agree::<TaskFlag>();
    names_agree::<ReportFormat>();
    parses_back::<ReportFormat>();
    parses_back::<TaskFlag>();
}
