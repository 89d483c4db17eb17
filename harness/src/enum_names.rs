//! Enums of this crate that travel as text: their strum and serde names are one.

#[path = "../../tests/support/enum_names.rs"]
mod check;

use check::{names_agree, parses_back};

#[test]
fn strum_and_serde_names_agree() {
    use crate::curate::pipeline::Phase;
    use crate::env::kind::BackendKind;
    use crate::rollout::trial::TrialPhase;

    names_agree::<TrialPhase>();
    parses_back::<TrialPhase>();
    names_agree::<BackendKind>();
    parses_back::<BackendKind>();
    names_agree::<Phase>();
    parses_back::<Phase>();
    names_agree::<crate::env::kubernetes::PodSecurity>();
    parses_back::<crate::env::kubernetes::PodSecurity>();
}
