//! The burn-once opening of a sealed test pack, shared by `geode crucible run` and
//! `geode search promote`: both must burn the same way, or one of them is a back door.

use std::path::{Path, PathBuf};

use geode_crucible::record::HoldoutReceipt;
use geode_crucible::{Attestation, DecisionRecord, FrozenContract, PackHash, SealState};

use crate::crucible::CrucibleRunError;
use crate::crucible::openings::{Event, OpeningsLedger};
use crate::crucible::preflight::{self, Plan, PlannedPack};
use crate::crucible::sealing;
use crate::env::vault::Vault;
use crate::pack::TaskPack;

/// A sealed pack opened for one test-stage contract. The opening is already burned on disk;
/// call [`OpenedPack::close`] after the campaign to record the decision and remove the
/// decrypted files.
pub struct OpenedPack {
    /// The decrypted pack, loaded from its temporary folder.
    pub pack: TaskPack,
    /// The record of this opening: the commitment, contract and candidate it was opened for.
    pub attestation: Attestation,
    state: SealState,
    state_path: PathBuf,
    ledger: OpeningsLedger,
    /// The hash of this opening's ledger entry; decisions name it.
    ledger_entry: String,
    /// Where this opening left the machine's holdout ledger; decisions carry it.
    receipt: HoldoutReceipt,
    plain: PathBuf,
    /// Holds `plain`: its tmpfs goes with it, or with this process however it ends.
    _vault: Vault,
    /// The campaign's trial folders, in a tmpfs of this process's own mount namespace; sealed
    /// with `key` into `<trials>.sealed` at [`OpenedPack::close`].
    trials: PathBuf,
    key: geode_crucible::SealKey,
}

impl OpenedPack {
    /// Where the sealed data lies on the host (the state, the sealed blob, the opened copy):
    /// an agent's tool call naming one is a `sealed_data_access` signal.
    pub fn sealed_paths(&self) -> Vec<String> {
        let state = self.state_path.to_string_lossy().into_owned();
        let blob = state.replace(".seal-state.json", ".sealed");
        vec![state, blob, self.plain.to_string_lossy().into_owned()]
    }

    /// Where the campaign's trials go: in memory until [`OpenedPack::close`] seals them.
    pub fn trials_dir(&self) -> &Path {
        &self.trials
    }

    /// The image store the campaign's environments are built into, in memory, over the
    /// machine's (which is read and never written: `ImageStore::open_over`).
    pub fn image_store(&self) -> PathBuf {
        build_store_beside(&self.trials)
    }

    /// Where this opening left the machine's holdout ledger: a receipt to publish.
    pub fn receipt(&self) -> &HoldoutReceipt {
        &self.receipt
    }

    /// Marks `record` as decided under this opening: its openings-ledger entry and its
    /// receipt from the machine's holdout ledger.
    pub fn mark(&self, record: &mut DecisionRecord) {
        record.ledger_entry = Some(self.ledger_entry.clone());
        record.holdout = Some(self.receipt.clone());
    }
}

fn invalid(what: &str, e: impl std::fmt::Display) -> CrucibleRunError {
    CrucibleRunError::Invalid(format!("{what}: {e}"))
}

/// The sealed pack's name: its state file is `<name>.seal-state.json`.
fn sealed_name(state_path: &Path) -> Result<String, CrucibleRunError> {
    state_path
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_suffix(".seal-state.json"))
        .map(str::to_string)
        .ok_or_else(|| {
            invalid(
                &state_path.display().to_string(),
                "not a NAME.seal-state.json file",
            )
        })
}

/// The store a sealed campaign builds its environments into, beside its trials.
fn build_store_beside(trials: &Path) -> PathBuf {
    trials.with_extension("images")
}

/// A sealed pack's hash and number of tasks, from its public commitment: what can be known of
/// its design before it opens.
pub fn sealed_size(
    state_path: &Path,
    commitments: &Path,
) -> Result<(PackHash, usize), CrucibleRunError> {
    let ledger = OpeningsLedger::beside(commitments, &sealed_name(state_path)?)?;
    Ok((ledger.commitment.pack_hash, ledger.commitment.tasks))
}

/// Burns the opening (recorded in the openings ledger beside the commitment and in the seal
/// state before anything is decrypted, so a crash still counts as the one opening), decrypts
/// the pack into a vault (hidden from trials) and loads it.
pub fn open_sealed(
    contract: &FrozenContract,
    state_path: &Path,
    key_path: &Path,
    commitments: &Path,
    jobs_dir: &Path,
    plan: &Plan<'_>,
) -> Result<OpenedPack, CrucibleRunError> {
    let key = sealing::read_key(key_path)?;
    let mut state = sealing::load_state(state_path)?;
    let ledger = OpeningsLedger::beside(commitments, &sealed_name(state_path)?)?;
    if ledger.commitment.commitment != state.commitment {
        return Err(invalid(
            &state_path.display().to_string(),
            format!(
                "its commitment {} is not the published one {} ({})",
                state.commitment,
                ledger.commitment.commitment,
                commitments.display()
            ),
        ));
    }
    // A reset seal state does not make an opened pack new: the ledger remembers.
    ledger.check_unopened()?;
    // The wrong scaffold, grader or pack, or a rule no outcome can pass, refused before
    // anything is burned: by the public commitment's hash and size.
    let sealed = PlannedPack::Sealed {
        pack_hash: &ledger.commitment.pack_hash,
        tasks: ledger.commitment.tasks,
    };
    preflight::check_identity(contract, plan.baseline, plan.candidate, &sealed)?;
    preflight::check_design(contract, &sealed, plan.allow_infeasible)?;
    let blob_path = state_path
        .to_string_lossy()
        .replace(".seal-state.json", ".sealed");
    let blob =
        std::fs::read(&blob_path).map_err(|e| CrucibleRunError::files(Path::new(&blob_path), e))?;
    // Nothing is burned for a key that cannot open the pack.
    state
        .check_key(&blob, &key)
        .map_err(|e| invalid(&format!("{blob_path} with {}", key_path.display()), e))?;
    // Plaintext left on disk by an older version's crash: nothing may keep it.
    let legacy = [
        jobs_dir.join(".sandbox"),
        crate::home::scratch_dir(jobs_dir),
    ];
    for old in legacy.iter().filter_map(|d| std::fs::read_dir(d).ok()) {
        for dir in old.flatten() {
            if dir.file_name().to_string_lossy().starts_with("opened-") {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }
    // A content opened before, from any copy, or used by another contract is not opened
    // (nothing burned).
    let holdouts = crate::crucible::holdouts::HoldoutLedger::for_this_machine();
    holdouts.check_opening(state.pack_hash.as_str(), &contract.hash().to_string())?;
    // Everything the campaign writes of the holdout (trials, the sandboxes' disks, layers
    // built from its environments) in memory that goes with this process, made before the
    // opening is burned: a process that cannot keep it off disk opens nothing.
    let scratch = crate::home::scratch_dir(jobs_dir);
    let images = build_store_beside(plan.trials);
    crate::env::vault::keep_off_disk(&[plan.trials, &scratch, &images])
        .map_err(|e| invalid("keeping the holdout off disk", e))?;
    let exe = std::env::current_exe().map_err(|e| invalid("the geode binary", e))?;
    // Where the plaintext will live, made before the opening is burned.
    let vault = Vault::open(&exe).map_err(|e| invalid("opened pack", e))?;
    let opened_at = chrono::Utc::now().to_rfc3339();
    let (attestation, permit) = state
        .begin_opening(contract, &opened_at)
        .map_err(|e| invalid(&state_path.display().to_string(), e))?;
    let entry = ledger.append(
        Event::Opening {
            commitment: attestation.commitment.to_string(),
            contract_hash: attestation.contract_hash.to_string(),
            candidate_scaffold_hash: attestation.candidate_scaffold_hash.to_string(),
        },
        &opened_at,
    )?;
    sealing::save_state(state_path, &state)?;
    let receipt = holdouts.record_opening(
        state.pack_hash.as_str(),
        &contract.hash().to_string(),
        &opened_at,
    )?;
    let entries = state
        .open(permit, &blob, &key)
        .map_err(|e| invalid(&blob_path, e))?;
    let plain = vault
        .path()
        .join(format!("opened-{}", &contract.hash().to_string()[..16]));
    sealing::unpack(&entries, &plain)?;
    match TaskPack::load(&plain) {
        Ok(pack) => Ok(OpenedPack {
            pack,
            attestation,
            state,
            state_path: state_path.to_path_buf(),
            ledger,
            ledger_entry: entry.hash,
            receipt,
            plain,
            _vault: vault,
            trials: plan.trials.to_path_buf(),
            key,
        }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&plain);
            Err(invalid("opened pack", e))
        }
    }
}

impl OpenedPack {
    /// Removes the decrypted files and, given the campaign's record, appends it to the
    /// openings ledger and writes it into the seal state (the state keeps the first decision
    /// only).
    pub fn close(mut self, record: Option<&DecisionRecord>) -> Result<(), CrucibleRunError> {
        let _ = std::fs::remove_dir_all(&self.plain);
        let sealed_trials = self.seal_trials();
        crate::env::vault::release(&self.trials);
        crate::env::vault::release(&self.image_store());
        if let Some(r) = record {
            self.ledger.append(
                Event::Decision {
                    opening: self.ledger_entry.clone(),
                    contract_hash: r.contract_hash.to_string(),
                    verdict: r.verdict.to_string(),
                    evidence_hash: r.evidence_hash.as_ref().map(|h| h.to_string()),
                },
                &chrono::Utc::now().to_rfc3339(),
            )?;
            self.state
                .record_decision(r)
                .map_err(|e| invalid(&self.state_path.display().to_string(), e))?;
            sealing::save_state(&self.state_path, &self.state)?;
        }
        sealed_trials
    }

    /// The campaign's trial folders (trajectories, logs, the run store), encrypted with the
    /// holdout's key into `<trials>.sealed`: readable again only by whoever may open the pack.
    fn seal_trials(&self) -> Result<(), CrucibleRunError> {
        let entries = sealing::archive_entries(&self.trials)?;
        // A nonce from the system's randomness, as for the pack's own sealing.
        let mut rng = <rand_chacha::ChaCha20Rng as rand::SeedableRng>::from_os_rng();
        let sealed = geode_crucible::seal(&entries, &self.state.pack_hash, &self.key, &mut rng)
            .map_err(|e| invalid("sealing the campaign's trials", e))?;
        let out = self.trials.with_extension("sealed");
        std::fs::write(&out, &sealed.blob).map_err(|e| CrucibleRunError::files(&out, e))
    }
}
