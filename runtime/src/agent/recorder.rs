//! The one owner of what a session leaves behind: checkpoint saves (and their failures),
//! timeline rows, ledger evidence and the driver's events. The loop's stages decide what
//! happened; they hand the records here, so no stage writes a store or a channel of its own.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;

use super::durable_session::{DurableSession, LoopSide, Save};
use super::events::LoopEvent;
use crate::ids::SessionId;
use crate::model::{DeltaSink, ModelDelta};
use crate::store::checkpoint::SavePoint;
use crate::store::timeline::{SessionTimeline, TimelineEvent};
use crate::tools::output::ToolOutputSink;

/// Where a session's records go. Every destination is optional: a bare loop (a judge, a
/// test) records nothing and still runs.
pub(crate) struct Recorder {
    session_id: SessionId,
    timeline: Option<Arc<SessionTimeline>>,
    events: Option<UnboundedSender<LoopEvent>>,
    /// The checkpoint and its ledger; a no-op until `create_session` or a resume installs one.
    pub(super) durable: DurableSession,
}

impl Recorder {
    pub(super) fn new(
        session_id: SessionId,
        timeline: Option<Arc<SessionTimeline>>,
        events: Option<UnboundedSender<LoopEvent>>,
    ) -> Self {
        Recorder {
            session_id,
            timeline,
            events,
            durable: DurableSession::default(),
        }
    }

    /// A timeline row; a failed write is logged, never fatal (the checkpoint is the record
    /// a resume needs).
    pub(super) fn record(&self, event: TimelineEvent) {
        if let Some(tl) = &self.timeline
            && let Err(e) = tl.append(&self.session_id, event)
        {
            tracing::warn!("timeline write failed: {e}");
        }
    }

    /// An event for the driver.
    pub(super) fn emit(&self, event: LoopEvent) {
        if let Some(tx) = &self.events {
            // A driver that stopped listening does not stop the turn.
            let _ = tx.send(event);
        }
    }

    /// A row of the evidence ledger (a no-op without a checkpoint).
    pub(super) fn evidence(&self, kind: &str, detail: serde_json::Value) {
        self.durable.evidence(kind, detail);
    }

    /// Save the checkpoint at `save`, with the loop's side of the state (a no-op without
    /// one). A failure is recorded in the timeline and the ledger and returned; the caller
    /// decides what may no longer run.
    pub(super) fn save(&mut self, save: Save<'_>, side: LoopSide<'_>) -> Result<(), String> {
        if !self.durable.is_durable() {
            return Ok(());
        }
        let point = save.point();
        let Err(e) = self.durable.save(save, side) else {
            return Ok(());
        };
        let error = e.to_string();
        self.checkpoint_failed(point, &error);
        Err(error)
    }

    /// Say that the save at `point` failed, in the timeline and the ledger.
    pub(super) fn checkpoint_failed(&self, point: SavePoint, error: &str) {
        tracing::warn!("checkpoint ({point}) failed: {error}");
        self.record(TimelineEvent::CheckpointFailed {
            stage: point,
            error: error.to_string(),
        });
        self.durable
            .evidence("checkpoint_failed", json!({"stage": point, "error": error}));
    }

    /// Where the model's deltas go: on to the driver as events, as they arrive.
    pub(super) fn delta_sink(&self) -> DeltaSink {
        let Some(tx) = self.events.clone() else {
            return DeltaSink::default();
        };
        DeltaSink::new(move |delta| {
            let _ = tx.send(LoopEvent::delta(delta));
        })
    }

    /// The driver's sink, keeping the reply's text in `streamed` as well: what of a reply the
    /// person interrupts was shown, and stays in the conversation.
    pub(super) fn collecting_sink(&self, streamed: Arc<Mutex<String>>) -> DeltaSink {
        let driver = self.delta_sink();
        DeltaSink::new(move |delta| {
            if let ModelDelta::Text(text) = &delta {
                streamed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_str(text);
            }
            driver.send(delta);
        })
    }

    /// Where running tools' output goes: on to the driver as events, as it is read.
    pub(super) fn tool_output_sink(&self) -> ToolOutputSink {
        let Some(tx) = self.events.clone() else {
            return ToolOutputSink::default();
        };
        ToolOutputSink::new(move |call_id, text| {
            let _ = tx.send(LoopEvent::ToolOutputDelta {
                call_id: call_id.to_string(),
                text: text.to_string(),
            });
        })
    }
}
