//! `/model` and `/effort` between turns: the session keeps its conversation, plan and guards
//! and calls a different model (or the same one at another effort) from its next round on.
//!
//! The switch is visible where it matters later: every assistant row's `StepSnapshot` already
//! names the model that produced it, a `model.switched` timeline row says when and why it
//! changed, and the checkpoint records the new route and effort so a resume rebuilds the model
//! the session was last using, not the one it started with.

use std::sync::Arc;

use super::AgenticLoop;
use super::durable_session::Save;
use crate::model::Model;
use crate::model::effort::Effort;
use crate::store::timeline::TimelineEvent;

/// A model built by the driver for a switch, with what the checkpoint records of it.
pub struct ModelSwitch {
    /// The model to call from the next round on.
    pub model: Arc<dyn Model>,
    /// The route it was built from (`anthropic:MODEL`, `scripted:FILE`).
    pub route: String,
    /// `anthropic`, `openai`, ... or `embedded`.
    pub provider: String,
    /// The reasoning effort it was built with (`None`: the model's default).
    pub effort: Option<Effort>,
}

impl AgenticLoop {
    /// The route and effort this session's model was built from, when the session is
    /// checkpointed (only the checkpoint settings remember the route).
    pub fn model_route(&self) -> Option<(&str, Option<Effort>)> {
        self.recorder.durable.model_route()
    }

    /// Call `switch.model` from the next round on. Between turns only: the driver owns the
    /// loop mutably, so no turn can be running. The checkpoint is saved at once so that a
    /// crash before the next turn still resumes on the new model.
    pub fn switch_model(&mut self, switch: ModelSwitch) -> Result<(), String> {
        let from = self.p.model.id().to_string();
        let to = switch.model.id().to_string();
        self.p.model_slot.set(switch.model.clone());
        self.p.model = switch.model;
        self.recorder
            .durable
            .switch_model(&switch.route, switch.provider, switch.effort);
        self.recorder.record(TimelineEvent::ModelSwitched {
            from,
            to,
            route: switch.route,
            effort: switch.effort.map(|e| e.to_string()),
        });
        self.save(Save::ModelSwitched)
    }
}
