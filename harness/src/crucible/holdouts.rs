//! The holdout ledger: which test-pack contents have given a first result, on this machine.
//!
//! A seal state burns one opening of one sealed file, but the file is not the holdout: the
//! same tasks sealed again under a new name, or frozen into a contract with another seed, would
//! give a fresh "first result". The ledger keys burn-once on the pack's content (the pack hash
//! of its tasks alone, whatever the trials per task or the name it was sealed under):
//! - `seal` refuses a content that a test-stage campaign has used;
//! - a test-stage campaign is recorded before its first trial, finished or not, and any later
//!   test-stage campaign on the same content under another contract is refused (the same
//!   contract may resume, or be replicated);
//! - an opening is refused before its seal state is burned when the ledger knows the sealed
//!   file's content as opened before (from any copy, under any contract) or used by another
//!   contract; the opening is recorded before anything is decrypted, and its receipt (the
//!   content and the entry's hash with the opening added) goes into the decision record.
//!
//! Layout: [`SYSTEM_DIR`]`/<content>.json` (`geode.holdout.v1`), one per content, rewritten
//! atomically under an exclusive lock on `<content>.lock`; a user who may not write there keeps
//! it under their own home's `.local/state/geode/holdouts`. Not under `$GEODE_HOME`: a second
//! setting of the variable would be a second, empty ledger.
//!
//! The limit of a local record: whoever can delete this folder and the seal state can open a
//! holdout again. What survives is the receipts: two decisions on one content carry two
//! different heads, and `geode crucible audit` over their folders names them; a receipt
//! published where this machine cannot rewrite it (a commit, a post) makes the first one
//! undeniable.

use std::path::PathBuf;

use geode_crucible::record::HoldoutReceipt;
use serde::{Deserialize, Serialize};

use crate::crucible::{CrucibleRunError, write_atomic};
use crate::datasets::split::SplitEntry;
use crate::pack::TaskPack;

const SCHEMA: &str = "geode.holdout.v1";

/// The machine-wide ledger's folder.
pub const SYSTEM_DIR: &str = "/var/lib/geode/holdouts";

/// The content key of a pack: its hash with the trials per task left out.
pub fn content_key(pack: &TaskPack) -> String {
    pack.hash(0).to_string()
}

fn refuse_opening(entry: &Entry, contract_hash: &str) -> Result<(), CrucibleRunError> {
    if let Some(first) = entry.openings.first() {
        return Err(opened_before(&entry.content, first));
    }
    match entry
        .campaigns
        .iter()
        .find(|c| c.contract_hash != contract_hash)
    {
        Some(first) => Err(burned(&entry.content, first)),
        None => Ok(()),
    }
}

/// A sealed file of the content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SealedCopy {
    /// The name the copy was sealed under (its `<name>.sealed` file).
    pub name: String,
    /// The sealed file's pack hash (content and trials per task).
    pub pack_hash: String,
    /// The path of the copy's seal state, as given when it was sealed.
    pub state: String,
    pub(crate) sealed_at: String,
    /// Its tasks' ids, hashes and MinHash signatures: what a train pack is checked against
    /// for copies and near-copies while the pack stays sealed (kept on this machine only).
    #[serde(default)]
    pub tasks: Vec<SplitEntry>,
}

/// A test-stage campaign on the content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsedBy {
    /// The contract the campaign runs under.
    pub contract_hash: String,
    /// The hash of the contract's candidate scaffold.
    pub candidate_scaffold: String,
    /// When the campaign was recorded (RFC 3339, UTC), before its first trial.
    pub started_at: String,
}

/// An opening of a sealed copy of the content: a sealed pack gives one result, so any
/// opening after it is refused, whatever the contract, the copy or its seal state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    pub(crate) sealed_pack_hash: String,
    /// The contract the copy was opened for.
    pub contract_hash: String,
    /// When the opening was recorded (RFC 3339, UTC), before anything was decrypted.
    pub opened_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    schema: String,
    content: String,
    #[serde(default)]
    sealed: Vec<SealedCopy>,
    #[serde(default)]
    campaigns: Vec<UsedBy>,
    #[serde(default)]
    openings: Vec<Opened>,
}

/// The ledger under one folder.
#[derive(Debug, Clone)]
pub struct HoldoutLedger {
    dir: PathBuf,
}

fn burned(content: &str, first: &UsedBy) -> CrucibleRunError {
    CrucibleRunError::Invalid(format!(
        "this test pack's content ({}) is burned: contract {} (candidate {}) used it first on \
         {}; a holdout gives one first result, whatever it is sealed or frozen as",
        &content[..16.min(content.len())],
        first.contract_hash,
        first.candidate_scaffold,
        first.started_at
    ))
}

fn opened_before(content: &str, first: &Opened) -> CrucibleRunError {
    CrucibleRunError::Invalid(format!(
        "this sealed pack's content ({}) was opened before, for contract {} on {}: a holdout \
         opens once, whatever copy, seal state or GEODE_HOME it is opened from",
        &content[..16.min(content.len())],
        first.contract_hash,
        first.opened_at
    ))
}

impl HoldoutLedger {
    /// The machine's ledger: [`SYSTEM_DIR`] where this user may keep it (root, or a folder an
    /// administrator opened to the users), else the user's own state folder found from the
    /// password database. Never under `$GEODE_HOME` or `$HOME`, which a second setting of the
    /// variable would make into a second, empty ledger.
    pub fn for_this_machine() -> HoldoutLedger {
        let system = std::path::Path::new(SYSTEM_DIR);
        if !system.exists() && std::fs::create_dir_all(system).is_ok() {
            // It names the holdouts' tasks: its maker's alone until an administrator opens it.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(system, std::fs::Permissions::from_mode(0o700));
        }
        if system.is_dir() && nix::unistd::access(system, nix::unistd::AccessFlags::W_OK).is_ok() {
            return HoldoutLedger::at(system);
        }
        let home = nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map_or_else(crate::home::geode_home, |u| u.dir);
        HoldoutLedger::at(home.join(".local/state/geode/holdouts"))
    }

    /// The ledger kept under `dir` rather than the machine's (created on first write).
    pub fn at(dir: impl Into<PathBuf>) -> HoldoutLedger {
        HoldoutLedger { dir: dir.into() }
    }

    fn path(&self, content: &str) -> PathBuf {
        self.dir.join(format!("{content}.json"))
    }

    fn read(&self, content: &str) -> Result<Entry, CrucibleRunError> {
        let path = self.path(content);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| CrucibleRunError::files(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Entry {
                schema: SCHEMA.into(),
                content: content.into(),
                sealed: Vec::new(),
                campaigns: Vec::new(),
                openings: Vec::new(),
            }),
            Err(e) => Err(CrucibleRunError::files(&path, e)),
        }
    }

    /// Runs `change` on the content's entry under its lock and writes the result.
    fn update<T>(
        &self,
        content: &str,
        change: impl FnOnce(&mut Entry) -> Result<T, CrucibleRunError>,
    ) -> Result<T, CrucibleRunError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| CrucibleRunError::files(&self.dir, e))?;
        let _held = crate::crucible::exclusive_lock(&self.dir.join(format!("{content}.lock")))?;
        let mut entry = self.read(content)?;
        let out = change(&mut entry)?;
        let path = self.path(content);
        let text =
            serde_json::to_string_pretty(&entry).map_err(|e| CrucibleRunError::files(&path, e))?;
        write_atomic(&path, &text)?;
        Ok(out)
    }

    /// Records a new sealed file of `pack`, refused when the content is burned.
    pub fn record_sealed(&self, pack: &TaskPack, copy: SealedCopy) -> Result<(), CrucibleRunError> {
        let content = content_key(pack);
        self.update(&content, |entry| {
            if let Some(first) = entry.campaigns.first() {
                return Err(burned(&content, first));
            }
            if let Some(first) = entry.openings.first() {
                return Err(opened_before(&content, first));
            }
            entry.sealed.push(copy);
            Ok(())
        })
    }

    /// The content a sealed file was recorded under when it was sealed here; a file sealed
    /// on another machine is known by its own pack hash.
    fn content_of(&self, sealed_pack_hash: &str) -> Result<String, CrucibleRunError> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Ok(sealed_pack_hash.to_string());
        };
        for file in dir.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| CrucibleRunError::files(&path, e))?;
            let entry: Entry =
                serde_json::from_str(&text).map_err(|e| CrucibleRunError::files(&path, e))?;
            if entry.sealed.iter().any(|s| s.pack_hash == sealed_pack_hash) {
                return Ok(entry.content);
            }
        }
        Ok(sealed_pack_hash.to_string())
    }

    /// The tasks of a sealed file recorded when it was sealed here (`None`: sealed elsewhere,
    /// or before tasks were recorded).
    pub fn sealed_tasks(
        &self,
        sealed_pack_hash: &str,
    ) -> Result<Option<Vec<SplitEntry>>, CrucibleRunError> {
        let content = self.content_of(sealed_pack_hash)?;
        let entry = self.read(&content)?;
        Ok(entry
            .sealed
            .into_iter()
            .find(|c| c.pack_hash == sealed_pack_hash && !c.tasks.is_empty())
            .map(|c| c.tasks))
    }

    /// Refuses to open a sealed file whose content was opened before, or used by another
    /// contract (checked before anything is burned).
    pub fn check_opening(
        &self,
        sealed_pack_hash: &str,
        contract_hash: &str,
    ) -> Result<(), CrucibleRunError> {
        let content = self.content_of(sealed_pack_hash)?;
        let entry = self.read(&content)?;
        refuse_opening(&entry, contract_hash)
    }

    /// Records the opening of a sealed file (after [`Self::check_opening`], before anything
    /// is decrypted) and returns the receipt a decision under it carries.
    pub fn record_opening(
        &self,
        sealed_pack_hash: &str,
        contract_hash: &str,
        opened_at: &str,
    ) -> Result<HoldoutReceipt, CrucibleRunError> {
        let content = self.content_of(sealed_pack_hash)?;
        self.update(&content, |entry| {
            refuse_opening(entry, contract_hash)?;
            entry.openings.push(Opened {
                sealed_pack_hash: sealed_pack_hash.to_string(),
                contract_hash: contract_hash.to_string(),
                opened_at: opened_at.to_string(),
            });
            let head = geode_crucible::canonical_sha256(&*entry)
                .map(hex::encode)
                .map_err(|e| CrucibleRunError::Invalid(format!("holdout ledger: {e}")))?;
            Ok(HoldoutReceipt {
                content: content.clone(),
                sealed_pack_hash: sealed_pack_hash.to_string(),
                head,
            })
        })
    }

    /// Records a test-stage campaign on `pack` before its first trial; refused when another
    /// contract used the content first.
    pub fn begin_campaign(&self, pack: &TaskPack, used: UsedBy) -> Result<(), CrucibleRunError> {
        let content = content_key(pack);
        self.update(&content, |entry| {
            if let Some(first) = entry.campaigns.first() {
                if first.contract_hash == used.contract_hash {
                    return Ok(());
                }
                return Err(burned(&content, first));
            }
            entry.campaigns.push(used);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A one-task pack whose content differs by `name`.
    fn pack(dir: &Path, name: &str) -> TaskPack {
        let task = dir.join(name);
        std::fs::create_dir_all(task.join("tests")).unwrap();
        std::fs::create_dir_all(task.join("environment")).unwrap();
        std::fs::write(task.join("instruction.md"), format!("Say {name}.\n")).unwrap();
        std::fs::write(
            task.join("task.toml"),
            "[task]\nname = \"t/hi\"\n[environment]\n",
        )
        .unwrap();
        std::fs::write(task.join("tests/test.sh"), "exit 0\n").unwrap();
        std::fs::write(
            task.join("environment/Dockerfile"),
            "FROM debian:bookworm-slim\n",
        )
        .unwrap();
        let pack = TaskPack::load(dir).unwrap();
        assert_eq!(pack.tasks.len(), 1, "{:?}", pack.broken);
        pack
    }

    fn used(contract: &str) -> UsedBy {
        UsedBy {
            contract_hash: contract.into(),
            candidate_scaffold: "cand".into(),
            started_at: "now".into(),
        }
    }

    #[test]
    fn a_content_gives_one_first_result() {
        let tmp = tempfile::tempdir().unwrap();
        let p = pack(&tmp.path().join("pack"), "hi");
        let ledger = HoldoutLedger::at(tmp.path().join("ledger"));
        let copy = |name: &str| SealedCopy {
            name: name.into(),
            pack_hash: p.hash(5).to_string(),
            state: format!("{name}.seal-state.json"),
            sealed_at: "now".into(),
            tasks: Vec::new(),
        };
        ledger.record_sealed(&p, copy("a")).unwrap();
        ledger.record_sealed(&p, copy("b")).unwrap();
        ledger.check_opening(p.hash(5).as_str(), "c1").unwrap();
        ledger.begin_campaign(&p, used("c1")).unwrap();
        // The same contract may resume; another may not, nor may the content be sealed again
        // or its other sealed copy be opened.
        ledger.begin_campaign(&p, used("c1")).unwrap();
        let err = ledger.begin_campaign(&p, used("c2")).unwrap_err();
        assert!(err.to_string().contains("burned"), "{err}");
        assert!(ledger.record_sealed(&p, copy("c")).is_err());
        assert!(ledger.check_opening(p.hash(5).as_str(), "c2").is_err());
        ledger.check_opening(p.hash(5).as_str(), "c1").unwrap();
        // An opening is recorded once: a second one is refused whatever its contract.
        let receipt = ledger
            .record_opening(p.hash(5).as_str(), "c1", "now")
            .unwrap();
        assert_eq!(receipt.content, content_key(&p));
        assert_eq!(receipt.head.len(), 64);
        let err = ledger
            .record_opening(p.hash(5).as_str(), "c1", "later")
            .unwrap_err();
        assert!(err.to_string().contains("opened before"), "{err}");
        assert!(ledger.check_opening(p.hash(5).as_str(), "c1").is_err());
        // Another content is free.
        let other = pack(&tmp.path().join("other"), "bye");
        ledger.begin_campaign(&other, used("c2")).unwrap();
    }
}
