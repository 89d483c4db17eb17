//! The durable side of a session, owned by its loop: the checkpoint writer with the effect
//! receipts and evidence ledger (`Durable`), and the turn a crash interrupted, waiting for
//! `resume_turn`. Every method is a no-op (or says "nothing") in a session without a
//! checkpoint, so the loop calls them unconditionally.
//!
//! A save names its save point and carries that point's data ([`Save`]); the point is written
//! into `state.json` as `stage` and names the failure in the timeline and the ledger.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::compaction::Compacted;
use super::counters::SessionCounters;
use super::durable::{
    CheckpointSettings, CheckpointState, ConversationView, FaultPoint, PendingBatch,
    PendingVerification, STATE_SCHEMA, TurnState,
};
use super::guards::GuardCounters;
use crate::cognition::CognitiveState;
use crate::conversation::Message;
use crate::ids::SessionId;
use crate::model::effort::Effort;
use crate::store::StoreError;
use crate::store::checkpoint::{CheckpointStore, SavePoint, SessionStatus};
use crate::store::ledger::EvidenceLedger;
use crate::store::receipts::{self, Receipt, ReceiptState, ReceiptStore};
use crate::store::rewind::{FileHistory, RewindStore};

/// A save point with the data it saves.
pub(super) enum Save<'a> {
    /// The user message, before the first model call of the turn.
    Round0(&'a TurnState),
    /// The reply and its batch, before any tool of it runs.
    PendingBatch(&'a TurnState, PendingBatch),
    /// The batch's results.
    CompletedBatch(&'a TurnState),
    /// A compacted conversation replacing the first `cut` messages (during a turn or between
    /// turns).
    Compaction {
        turn: Option<&'a TurnState>,
        cut: usize,
        compacted: &'a Compacted,
    },
    /// The turn is over.
    TurnEnd,
    /// A model switch between turns.
    ModelSwitched,
}

impl Save<'_> {
    pub(super) fn point(&self) -> SavePoint {
        match self {
            Save::Round0(_) => SavePoint::Round0,
            Save::PendingBatch(..) => SavePoint::PendingBatch,
            Save::CompletedBatch(_) => SavePoint::CompletedBatch,
            Save::Compaction { .. } => SavePoint::Compaction,
            Save::TurnEnd => SavePoint::TurnEnd,
            Save::ModelSwitched => SavePoint::ModelSwitched,
        }
    }

    fn turn(&self) -> Option<&TurnState> {
        match self {
            Save::Round0(t) | Save::PendingBatch(t, _) | Save::CompletedBatch(t) => Some(t),
            Save::Compaction { turn, .. } => *turn,
            Save::TurnEnd | Save::ModelSwitched => None,
        }
    }
}

/// What the loop lends a save: its side of `state.json` and the conversation.
pub(super) struct LoopSide<'a> {
    pub(super) session_id: &'a SessionId,
    pub(super) model: &'a str,
    pub(super) counters: SessionCounters,
    pub(super) system_prompt_hash: Option<&'a str>,
    pub(super) cognition: CognitiveState,
    pub(super) guards: &'a GuardCounters,
    pub(super) messages: &'a [Message],
}

/// A turn a crash interrupted, with the batch that was pending when it stopped.
pub(super) type Interrupted = (TurnState, Option<PendingBatch>);

/// A durable session's stores.
#[derive(Debug)]
pub(crate) struct Durable {
    store: CheckpointStore,
    receipts: Arc<ReceiptStore>,
    ledger: Arc<EvidenceLedger>,
    /// What `/rewind` needs: a point before each turn, the files each call changed.
    files: Arc<FileHistory>,
    settings: CheckpointSettings,
    cwd: String,
    view: ConversationView,
    /// How many of the loop's messages (prefix included) the checkpoint holds.
    saved: usize,
}

impl Durable {
    /// The stores of a new session (its directory must not exist yet).
    pub(crate) fn create(
        settings: &CheckpointSettings,
        id: &SessionId,
        model_id: &str,
        cwd: &Path,
    ) -> Result<Self, StoreError> {
        let store = CheckpointStore::create(&settings.root, id, model_id, cwd)?;
        Self::with_store(store, settings, cwd, true)
    }

    /// The stores of an existing session; its receipts database must exist (a missing one
    /// would forget effects that started).
    pub(crate) fn resume(
        store: CheckpointStore,
        settings: &CheckpointSettings,
        cwd: &Path,
    ) -> Result<Self, StoreError> {
        Self::with_store(store, settings, cwd, false)
    }

    fn with_store(
        store: CheckpointStore,
        settings: &CheckpointSettings,
        cwd: &Path,
        create: bool,
    ) -> Result<Self, StoreError> {
        let id = store.session_id().clone();
        let receipts = ReceiptStore::open(&store.dir().join(receipts::DB_FILE), &id, create)?;
        let ledger = EvidenceLedger::open(store.dir(), &id)?;
        let rewind = Arc::new(RewindStore::open(store.dir())?);
        Ok(Durable {
            receipts: Arc::new(receipts),
            ledger: Arc::new(ledger),
            files: Arc::new(FileHistory::new(
                rewind,
                cwd,
                unwatched(&settings.root, cwd),
            )),
            settings: settings.clone(),
            cwd: cwd.display().to_string(),
            view: ConversationView::default(),
            saved: 0,
            store,
        })
    }

    /// The receipts, for the executor to write.
    pub(crate) fn receipts(&self) -> Arc<ReceiptStore> {
        self.receipts.clone()
    }

    /// The file history, for the executor to write.
    pub(crate) fn file_history(&self) -> Arc<FileHistory> {
        self.files.clone()
    }

    /// The evidence ledger, for the executor to write.
    pub(crate) fn ledger(&self) -> Arc<EvidenceLedger> {
        self.ledger.clone()
    }

    /// At a resume: receipts still `accepted` become `uncertain` (see restore.rs).
    pub(crate) fn mark_accepted_uncertain(&self, reason: &str) -> Result<Vec<Receipt>, StoreError> {
        self.receipts.mark_accepted_uncertain(reason)
    }

    pub(super) fn receipt(&self, call_id: &str) -> Result<Option<Receipt>, StoreError> {
        self.receipts.get(call_id)
    }

    /// Receipts waiting for `geode receipts reconcile`.
    pub(super) fn uncertain_receipts(&self) -> Result<Vec<Receipt>, StoreError> {
        Ok(self
            .receipts
            .list()?
            .into_iter()
            .filter(|r| r.state == ReceiptState::Uncertain)
            .collect())
    }

    /// The state.json content for a save.
    fn state(&self, save: &Save<'_>, side: LoopSide<'_>) -> CheckpointState {
        let turn = save.turn();
        CheckpointState {
            schema: STATE_SCHEMA.to_string(),
            session_id: side.session_id.clone(),
            saved_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            stage: save.point(),
            turn_number: side.counters.turn(),
            model_calls: side.counters.model_calls(),
            round: turn.map_or(0, |t| t.rounds),
            model: side.model.to_string(),
            model_route: self.settings.model_route.clone(),
            provider: self.settings.provider.clone(),
            effort: self.settings.effort,
            cwd: self.cwd.clone(),
            system_prompt_hash: side.system_prompt_hash.map(str::to_string),
            cognition: side.cognition,
            guards: side.guards.clone(),
            turn: turn.cloned(),
            pending_verification: turn.filter(|t| !t.pending_misses.is_empty()).map(|t| {
                PendingVerification {
                    repairs_used: t.repairs,
                    misses: t.pending_misses.clone(),
                }
            }),
            pending_batch: match save {
                Save::PendingBatch(_, batch) => Some(batch.clone()),
                _ => None,
            },
            conversation: self.view.clone(),
            session_usage: side.counters.usage(),
        }
    }

    /// Append the unsaved messages, then commit `state` (with the new view) atomically.
    fn save(&mut self, messages: &[Message], mut state: CheckpointState) -> Result<(), StoreError> {
        let Some(unsaved) = messages.get(self.saved..) else {
            return Err(StoreError::refused(
                self.store.dir(),
                format!(
                    "the conversation has {} messages but {} were saved: it was changed without \
                     the checkpoint",
                    messages.len(),
                    self.saved
                ),
            ));
        };
        if state.stage == SavePoint::Round0 {
            self.record_point(unsaved, &state)?;
        }
        let first = self.view.next_seq;
        if !unsaved.is_empty() {
            self.store.append_messages(first, unsaved)?;
        }
        let mut view = self.view.clone();
        view.next_seq = first + unsaved.len() as u64;
        state.conversation = view.clone();
        self.store.write_state(&state)?;
        self.view = view;
        self.saved = messages.len();
        Ok(())
    }

    /// Record where `/rewind` goes back to before the turn `state` starts: the loop state as
    /// it was between turns, with the conversation as it is before `unsaved` (the prompt).
    fn record_point(&self, unsaved: &[Message], state: &CheckpointState) -> Result<(), StoreError> {
        let before = CheckpointState {
            stage: SavePoint::TurnEnd,
            turn_number: state.turn_number.saturating_sub(1),
            round: 0,
            turn: None,
            pending_verification: None,
            pending_batch: None,
            conversation: self.view.clone(),
            ..state.clone()
        };
        let prompt = unsaved
            .iter()
            .rev()
            .find(|m| m.role == crate::conversation::Role::User)
            .map(Message::text)
            .unwrap_or_default();
        let json = serde_json::to_string(&before).map_err(|e| StoreError::Json {
            path: self.store.dir().display().to_string(),
            message: format!("the rewind point does not serialize: {e}"),
        })?;
        self.files
            .store()
            .record_point(state.turn_number, &prompt, &json)
    }

    /// Commit a compacted view: the first `cut` messages (all saved) are replaced by the
    /// summary. Nothing changes when the commit fails.
    fn commit_compaction(
        &mut self,
        cut: usize,
        compacted: &Compacted,
        mut state: CheckpointState,
    ) -> Result<(), StoreError> {
        let dropped_rows = cut.saturating_sub(self.view.prefix.len()) as u64;
        let view = ConversationView {
            prefix: vec![compacted.summary.clone()],
            live_from_seq: self.view.live_from_seq + dropped_rows,
            next_seq: self.view.next_seq,
            compactions: self.view.compactions + 1,
            last_summary_sha256: Some(compacted.sha.clone()),
        };
        state.conversation = view.clone();
        self.store.write_state(&state)?;
        self.view = view;
        self.saved = compacted.messages.len();
        Ok(())
    }
}

/// What the file history never watches: the sessions' store and, when it lies inside the
/// workspace (a session started in a home directory), GEODE's home around it. Its timeline and
/// checkpoints are GEODE's records, not the work a rewind undoes.
fn unwatched(sessions: &Path, workspace: &Path) -> Vec<PathBuf> {
    let sessions = sessions
        .canonicalize()
        .unwrap_or_else(|_| sessions.to_path_buf());
    let mut dirs = vec![sessions.clone()];
    if let Some(home) = sessions.parent()
        && home.starts_with(workspace)
        && home != workspace
    {
        dirs.push(home.to_path_buf());
    }
    dirs
}

/// The loop's durable side; empty in a session without a checkpoint.
#[derive(Debug, Default)]
pub(super) struct DurableSession {
    stores: Option<Durable>,
    interrupted: Option<Interrupted>,
}

impl DurableSession {
    /// Make a new session durable.
    pub(super) fn install(&mut self, durable: Durable) {
        self.stores = Some(durable);
    }

    /// Install the stores of a restored session whose checkpoint holds `view` (`saved`
    /// messages), with the turn its crash interrupted.
    pub(super) fn restore(
        &mut self,
        mut durable: Durable,
        view: ConversationView,
        saved: usize,
        interrupted: Option<Interrupted>,
    ) {
        durable.view = view;
        durable.saved = saved;
        self.stores = Some(durable);
        self.interrupted = interrupted;
    }

    /// The checkpoint and file history a rewind works on (`None` without a checkpoint).
    pub(super) fn rewind_parts(&self) -> Option<(&CheckpointStore, &Arc<FileHistory>)> {
        self.stores.as_ref().map(|d| (&d.store, &d.files))
    }

    /// After a rewind wrote `view` (`saved` messages) as the checkpoint: saves go on from
    /// there, and no interrupted turn is left to finish.
    pub(super) fn rewound(&mut self, view: ConversationView, saved: usize) {
        if let Some(d) = self.stores.as_mut() {
            d.view = view;
            d.saved = saved;
        }
        self.interrupted = None;
    }

    /// The interrupted turn, once.
    pub(super) fn take_interrupted(&mut self) -> Option<Interrupted> {
        self.interrupted.take()
    }

    pub(super) fn is_durable(&self) -> bool {
        self.stores.is_some()
    }

    pub(super) fn dir(&self) -> Option<&Path> {
        self.stores.as_ref().map(|d| d.store.dir())
    }

    /// The route and effort the session's model was built from (only the checkpoint settings
    /// remember the route).
    pub(super) fn model_route(&self) -> Option<(&str, Option<Effort>)> {
        self.stores
            .as_ref()
            .map(|d| (d.settings.model_route.as_str(), d.settings.effort))
    }

    /// Record the model a switch moved to, for the next save and a later resume.
    pub(super) fn switch_model(&mut self, route: &str, provider: String, effort: Option<Effort>) {
        if let Some(d) = self.stores.as_mut() {
            d.settings.model_route = route.to_string();
            d.settings.provider = provider;
            d.settings.effort = effort;
        }
    }

    /// Save at a save point: the unsaved messages, then state.json (for a compaction: the
    /// compacted view). `Ok` without a checkpoint.
    pub(super) fn save(&mut self, save: Save<'_>, side: LoopSide<'_>) -> Result<(), StoreError> {
        let Some(d) = self.stores.as_mut() else {
            return Ok(());
        };
        let messages = side.messages;
        let state = d.state(&save, side);
        match save {
            Save::Compaction { cut, compacted, .. } => d.commit_compaction(cut, compacted, state),
            _ => d.save(messages, state),
        }
    }

    /// Whether the checkpoint holds all `len` messages of the conversation (always, without
    /// one): only such a conversation may be compacted.
    pub(super) fn holds(&self, len: usize) -> bool {
        self.stores.as_ref().is_none_or(|d| d.saved == len)
    }

    /// Messages at the start of the conversation that are an earlier summary, when the
    /// checkpoint knows (`None` without one).
    pub(super) fn summary_prefix_len(&self) -> Option<usize> {
        self.stores.as_ref().map(|d| d.view.prefix.len())
    }

    /// A compaction summary as a file beside the checkpoint (`None` without one).
    pub(super) fn write_summary_artifact(
        &self,
        text: &str,
        sha: &str,
    ) -> Result<Option<PathBuf>, StoreError> {
        let Some(d) = &self.stores else {
            return Ok(None);
        };
        let dir = d.store.dir().join("artifacts");
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let n = d.view.compactions + 1;
        let path = dir.join(format!("compaction-{n}-{}.md", &sha[..12]));
        crate::store::checkpoint::write_atomic(&path, text.as_bytes())?;
        Ok(Some(path))
    }

    /// Move the session's status; refused moves (a closed session) are logged, not fatal.
    pub(super) fn set_status(&self, to: SessionStatus) {
        if let Some(d) = &self.stores
            && let Err(e) = d.store.set_status(to)
        {
            tracing::warn!("session status: {e}");
        }
    }

    /// Continuing a closed session is the explicit decision `reopen` asks for.
    pub(super) fn reopen_if_closed(&self) -> Result<(), StoreError> {
        if let Some(d) = &self.stores
            && d.store.status()?.is_terminal()
        {
            d.store.reopen()?;
        }
        Ok(())
    }

    /// A call's receipt (`None` without a checkpoint).
    pub(super) fn receipt(&self, call_id: &str) -> Result<Option<Receipt>, StoreError> {
        match &self.stores {
            Some(d) => d.receipt(call_id),
            None => Ok(None),
        }
    }

    /// A best-effort, masked diagnostic row.
    pub(super) fn evidence(&self, kind: &str, detail: Value) {
        if let Some(d) = &self.stores {
            d.ledger.record(kind, detail);
        }
    }

    /// Stop here when a crash test asked to.
    pub(super) async fn fault(&self, point: FaultPoint) {
        if let Some(d) = &self.stores {
            d.settings.faults.pause_if(point).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_without_a_checkpoint_saves_nothing_and_holds_everything() {
        let mut d = DurableSession::default();
        let id = SessionId::new("s");
        let counters = SessionCounters::default();
        let guards = GuardCounters::default();
        let messages = [Message::user_text("hi")];
        let turn = TurnState::default();
        let side = LoopSide {
            session_id: &id,
            model: "m",
            counters,
            system_prompt_hash: None,
            cognition: CognitiveState::default(),
            guards: &guards,
            messages: &messages,
        };
        assert!(d.save(Save::Round0(&turn), side).is_ok());
        assert!(!d.is_durable() && d.holds(7) && d.dir().is_none());
        assert_eq!(d.summary_prefix_len(), None);
        assert!(d.receipt("c").unwrap().is_none());
        assert!(d.take_interrupted().is_none());
        assert!(
            d.write_summary_artifact("x", &"0".repeat(64))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn each_save_names_its_point() {
        let turn = TurnState::default();
        let batch = PendingBatch {
            turn: 1,
            round: 1,
            model_id: "m".into(),
            correlation_id: "s:1:1".into(),
            calls: Vec::new(),
        };
        let saves = [
            (Save::Round0(&turn), SavePoint::Round0),
            (Save::PendingBatch(&turn, batch), SavePoint::PendingBatch),
            (Save::CompletedBatch(&turn), SavePoint::CompletedBatch),
            (Save::TurnEnd, SavePoint::TurnEnd),
            (Save::ModelSwitched, SavePoint::ModelSwitched),
        ];
        for (save, point) in saves {
            assert_eq!(save.point(), point);
            assert_eq!(
                save.turn().is_some(),
                point.as_str().contains("batch") || point == SavePoint::Round0
            );
        }
    }
}
