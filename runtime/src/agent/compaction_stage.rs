//! The observe-and-compact stage: once the context passes a share of the model's window
//! (scaffold `compaction`), the older part of the conversation is replaced by a summary.
//!
//! Order: PreCompact hook (continue, `keep_recent` rewrite, or defer) -> choose the cut
//! (`compaction.rs`) -> summary artifact `artifacts/compaction-<n>-<sha>.md` in the session
//! directory -> commit of the compacted view to the checkpoint -> PostCompact hook -> a
//! `compaction` timeline row. The conversation changes only after the checkpoint committed the
//! new view, so a crash during compaction leaves the conversation as it was (the dropped rows
//! stay in `checkpoint.db` either way).

use serde_json::json;

use super::agentic_loop::AgenticLoop;
use super::compaction::{choose_cut, compact_at};
use super::durable::{FaultPoint, TurnState};
use super::durable_session::Save;
use crate::hooks::{HookDecision, HookEvent};
use crate::store::checkpoint::SavePoint;
use crate::store::timeline::TimelineEvent;

impl AgenticLoop {
    /// Messages at the start of the conversation that are an earlier summary.
    fn summary_prefix_len(&self) -> usize {
        self.recorder
            .durable
            .summary_prefix_len()
            .unwrap_or_else(|| usize::from(self.transcript.starts_with_summary()))
    }

    /// Compact when the context passed its threshold. Never fails the turn: a compaction that
    /// cannot be committed is recorded and the conversation stays as it was.
    pub(super) async fn compact_if_needed(&mut self, turn: &TurnState, system: &str) {
        let estimated = self.transcript.context_tokens(system);
        if estimated >= self.p.scaffold.compaction.threshold_tokens() {
            self.compact(Some(turn), estimated).await;
        }
    }

    /// Compact now, whatever the estimate (the provider said the context overflowed). Returns
    /// whether a compaction was committed.
    pub(super) async fn compact_now(&mut self, turn: &TurnState, system: &str) -> bool {
        let estimated = self.transcript.context_tokens(system);
        self.compact(Some(turn), estimated).await
    }

    /// `/compact`: compact between turns, whatever the estimate. The message counts before and
    /// after, or `None` when nothing was compacted (nothing old enough to summarise, a
    /// PreCompact hook deferred, or the checkpoint refused the commit).
    pub async fn compact_between_turns(&mut self) -> Option<(usize, usize)> {
        let before = self.transcript.len();
        let estimated = self.transcript.context_tokens("");
        self.compact(None, estimated)
            .await
            .then_some((before, self.transcript.len()))
    }

    /// Returns whether a compaction was committed.
    async fn compact(&mut self, turn: Option<&TurnState>, estimated: u64) -> bool {
        let limits = self.p.scaffold.compaction.clone();
        let threshold = limits.threshold_tokens();
        if !self.recorder.durable.holds(self.transcript.len()) {
            // Only a conversation the checkpoint holds in full is compacted.
            return false;
        }
        let before = self.transcript.len();
        let mut keep = limits.keep_recent_messages;
        let row = |status: &str, keep: usize, after: usize, sha: Option<String>, at| {
            TimelineEvent::Compaction {
                status: status.to_string(),
                messages_before: before,
                messages_after: after,
                estimated_tokens: estimated,
                threshold_tokens: threshold,
                keep_recent: keep,
                summary_sha256: sha,
                artifact: at,
            }
        };
        let pre = HookEvent::PreCompact {
            message_count: before,
            keep_recent: keep,
        };
        match self.hook(pre, None, 0).await.decision {
            HookDecision::Defer => {
                self.recorder
                    .record(row("deferred", keep, before, None, None));
                return false;
            }
            HookDecision::KeepRecent(n) => keep = n,
            _ => {}
        }
        let messages = self.transcript.messages();
        let Some(cut) = choose_cut(messages, keep, self.summary_prefix_len()) else {
            return false;
        };
        let plan = self.cognition().plan;
        let compacted = compact_at(messages, cut, plan.as_ref(), limits.summary_tool_calls);
        let sha = compacted.sha.clone();
        let after = compacted.messages.len();
        let artifact = match self
            .recorder
            .durable
            .write_summary_artifact(&compacted.text, &sha)
        {
            Ok(a) => a.map(|p| p.display().to_string()),
            Err(e) => {
                self.recorder
                    .checkpoint_failed(SavePoint::Compaction, &e.to_string());
                self.recorder
                    .record(row("failed", keep, before, Some(sha), None));
                return false;
            }
        };
        self.recorder
            .durable
            .fault(FaultPoint::DuringCompaction)
            .await;
        let save = Save::Compaction {
            turn,
            cut,
            compacted: &compacted,
        };
        if self.save(save).is_err() {
            self.recorder
                .record(row("failed", keep, before, Some(sha), artifact));
            return false;
        }
        self.transcript.replace(compacted.messages);
        let post = HookEvent::PostCompact {
            summary_sha256: sha.clone(),
        };
        self.hook(post, None, 0).await;
        self.recorder.record(row(
            "done",
            keep,
            after,
            Some(sha.clone()),
            artifact.clone(),
        ));
        self.recorder.evidence(
            "compaction",
            json!({"messages_before": before, "messages_after": after, "summary_sha256": sha}),
        );
        true
    }
}
