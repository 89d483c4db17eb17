//! Enums of this crate that travel as text: their strum and serde names are one.

#[path = "../../tests/support/enum_names.rs"]
mod check;

use check::{names_agree, parses_back};

#[test]
fn strum_and_serde_names_agree() {
    use crate::agent::TerminationReason;
    use crate::agent::durable::FaultPoint;
    use crate::agent::restore::Disposition;
    use crate::conversation::ImageMediaType;
    use crate::hooks::{HookDecisionKind, HookEventKind};
    use crate::model::catalog::ProviderKind;
    use crate::model::effort::Effort;
    use crate::model::errors::ErrorClass;
    use crate::policy::{HitlLevel, SafetyLevel, SessionMode};
    use crate::store::checkpoint::SavePoint;
    use crate::store::checkpoint::SessionStatus;
    use crate::store::receipts::{ReceiptState, ReconcileOutcome};
    use crate::store::timeline::PipelineStep;
    use crate::tools::approval::PermissionMode;
    use crate::tools::computer::{ActionKind, ScrollDirection};

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
    names_agree::<HitlLevel>();
    parses_back::<HitlLevel>();
    parses_back::<SessionMode>();
    names_agree::<HookEventKind>();
    parses_back::<HookEventKind>();
    names_agree::<HookDecisionKind>();
    parses_back::<HookDecisionKind>();
    names_agree::<PipelineStep>();
    parses_back::<PipelineStep>();
    names_agree::<ActionKind>();
    parses_back::<ActionKind>();
    names_agree::<ScrollDirection>();
    parses_back::<ScrollDirection>();
    names_agree::<ImageMediaType>();
    parses_back::<ImageMediaType>();
    names_agree::<TerminationReason>();
    parses_back::<TerminationReason>();
    names_agree::<ProviderKind>();
    parses_back::<ProviderKind>();
    names_agree::<Disposition>();
    parses_back::<Disposition>();
    names_agree::<SavePoint>();
    parses_back::<SavePoint>();
    // Not serde types: a fault point is an environment variable's value, a permission mode a
    // command's word; their one spelling is strum's.
    parses_back::<FaultPoint>();
    parses_back::<PermissionMode>();
}
