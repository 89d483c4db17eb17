//! Step 7 of the pipeline and its settlement: what is made durable around an effect. Before
//! dispatch, the effect receipt (so a crash never forgets that an effect started) and, for
//! `/rewind`, the files the call may change; after it, the receipt's outcome and the files it
//! did change. A record that cannot be written before the call stops it; one that cannot be
//! written after it is logged (the effect happened either way).

use std::path::PathBuf;

use super::{Denial, Pending, PipelineStep, StepContext, ToolExecutor, deny};
use crate::store::effects::{self, EffectProbe, Settlement, needs_receipt};
use crate::store::receipts::NewReceipt;
use crate::store::rewind::Watch;
use crate::store::timeline::CallOutcome;
use crate::tools::plan::{ResourceKeyRule, ToolOutput};

impl ToolExecutor {
    /// An effectful call of a checkpointed session gets a durable `accepted` receipt before
    /// dispatch; if it cannot be written, the call does not run. Returns whether it got one.
    pub(super) fn accept_receipt(
        &self,
        pending: &Pending<'_>,
        step: &StepContext,
    ) -> Result<bool, Denial> {
        let Some(receipts) = &self.receipts else {
            return Ok(false);
        };
        let probe = EffectProbe {
            binding: &pending.tool.binding,
            effectful: pending.tool.spec.effectful,
            safety: pending.classification.safety,
            command: pending.tool.spec.command(&pending.input),
        };
        if !needs_receipt(probe) {
            return Ok(false);
        }
        let receipt = NewReceipt {
            call_id: &pending.id,
            tool: &pending.tool.spec.name,
            input: &pending.input,
            turn: step.turn,
            round: step.snapshot.round,
        };
        match receipts.accept(receipt) {
            Ok(()) => Ok(true),
            Err(e) => deny(
                PipelineStep::Receipt,
                format!("the effect receipt could not be written ({e})"),
            ),
        }
    }

    /// Keep what a receipted call may change, so a rewind can put it back: the files it names
    /// (edits and writes), else the whole workspace (a command, an effectful MCP tool, a
    /// delegated agent). `None` without file history, and for calls that change nothing.
    pub(super) fn watch_files(
        &self,
        pending: &Pending<'_>,
        receipted: bool,
    ) -> Result<Option<Watch>, Denial> {
        let (Some(history), true) = (&self.file_history, receipted) else {
            return Ok(None);
        };
        let named = matches!(pending.tool.spec.resource_keys, ResourceKeyRule::PathArgs)
            && pending.tool.binding.starts_with("builtin:")
            && !pending.paths.is_empty();
        let files: Option<Vec<PathBuf>> =
            named.then(|| pending.paths.iter().map(|(_, p)| p.clone()).collect());
        match history.before(files.as_deref()) {
            Ok(watch) => Ok(Some(watch)),
            Err(e) => deny(
                PipelineStep::Receipt,
                format!("the rewind record could not be written ({e})"),
            ),
        }
    }

    /// After dispatch: the files the call changed, then the receipt's outcome.
    pub(super) fn record_effect(
        &self,
        pending: &Pending<'_>,
        step: &StepContext,
        (receipted, watch): (bool, Option<Watch>),
        (output, outcome): (&ToolOutput, &CallOutcome),
    ) {
        let (id, tool) = (&pending.id, &pending.tool.spec.name);
        if let (Some(watch), Some(history)) = (watch, &self.file_history)
            && let Err(e) = history.after(watch, step.turn, id, tool)
        {
            tracing::warn!("rewind record of {id}: {e}");
            let why = format!("its changes could not be recorded ({e})");
            if let Err(e) = history.store().record_gap(step.turn, id, tool, &why) {
                tracing::warn!("rewind gap of {id}: {e}");
            }
        }
        if let (true, Some(receipts)) = (receipted, &self.receipts) {
            let settlement = Settlement {
                call_id: id,
                binding: &pending.tool.binding,
                outcome,
                content: &output.content,
                is_error: output.is_error,
                cancelled: step.cancel.is_cancelled(),
            };
            // A failed write leaves the receipt `accepted`, which the next resume turns into
            // `uncertain`: never a false "done".
            if let Err(e) = effects::settle(receipts, settlement) {
                tracing::warn!("effect receipt of {id}: {e}");
            }
        }
    }
}
