//! Sealed holdout packs on disk: the crucible's pure sealing (ChaCha20-Poly1305, commitment,
//! burn-once state) around files.
//!
//! Layout: `<out>/<name>.sealed` (the encrypted pack), `<out>/<name>.seal-state.json` (the
//! burn-once state, `geode.seal_state.v1`), and the public commitment
//! `datasets/commitments/<name>.json`. The key lives in a file outside the repository (mode
//! 0600); only `geode crucible run` on a test-stage contract reads it.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use geode_crucible::{ArchiveEntry, SealKey, SealState, seal};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::crucible::{CrucibleRunError, write_atomic};
use crate::pack::{PackHash, TaskPack};
use geode_crucible::Commitment;

/// The public part of a sealed pack (`geode.commitment.v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedCommitment {
    /// Always `geode.commitment.v1`.
    pub schema: String,
    /// The name the pack was sealed under.
    pub name: String,
    /// The commitment to the sealed content, published before any opening.
    pub commitment: Commitment,
    /// The sealed pack's hash (content and trials per task).
    pub pack_hash: PackHash,
    /// The trials per task the pack was sealed for.
    pub trials_per_task: u32,
    /// How many tasks the sealed pack holds.
    pub tasks: usize,
}

/// Read a 32-byte key (64 hex characters) from a key file, which only its owner may read.
pub fn read_key(path: &Path) -> Result<SealKey, CrucibleRunError> {
    let mode = std::fs::metadata(path)
        .map_err(|e| CrucibleRunError::files(path, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(CrucibleRunError::files(
            path,
            format!(
                "the key file is open to others (mode {:04o}); `chmod 600` it first",
                mode & 0o7777
            ),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| CrucibleRunError::files(path, e))?;
    SealKey::from_hex(text.trim()).map_err(|e| CrucibleRunError::files(path, e))
}

/// Create a fresh key file (mode 0600 from creation; refuses to overwrite). Keys are the one
/// thing drawn from the operating system's randomness, not from a seed: a seeded key is no key.
pub fn new_key(path: &Path) -> Result<SealKey, CrucibleRunError> {
    let mut rng = ChaCha20Rng::from_os_rng();
    let key = SealKey::generate(&mut rng);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CrucibleRunError::files(path, e))?;
    std::io::Write::write_all(&mut f, format!("{}\n", key.to_hex()).as_bytes())
        .map_err(|e| CrucibleRunError::files(path, e))?;
    Ok(key)
}

/// The files of a pack folder as archive entries (relative path, mode, bytes), in path order.
pub fn archive_entries(root: &Path) -> Result<Vec<ArchiveEntry>, CrucibleRunError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| CrucibleRunError::files(root, e))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .map_err(|e| CrucibleRunError::files(path, e))?;
        let meta = entry
            .metadata()
            .map_err(|e| CrucibleRunError::files(path, e))?;
        out.push(ArchiveEntry {
            path: rel.to_string_lossy().into_owned(),
            mode: meta.permissions().mode(),
            bytes: std::fs::read(path).map_err(|e| CrucibleRunError::files(path, e))?,
        });
    }
    Ok(out)
}

/// The files `seal_pack` wrote, and the commitment it published.
pub struct SealedFiles {
    /// The encrypted pack, `<out>/<name>.sealed`.
    pub blob: PathBuf,
    /// The burn-once seal state, `<out>/<name>.seal-state.json`.
    pub state: PathBuf,
    /// The public commitment file, `<commitments>/<name>.json`.
    pub commitment: PathBuf,
    /// The public commitment, as written there.
    pub published: PublishedCommitment,
}

/// Encrypt a pack, write the blob, its burn-once state and the public commitment.
pub fn seal_pack(
    pack_dir: &Path,
    name: &str,
    trials_per_task: u32,
    key: &SealKey,
    out_dir: &Path,
    commitments_dir: &Path,
) -> Result<SealedFiles, CrucibleRunError> {
    let pack = TaskPack::load(pack_dir).map_err(|e| CrucibleRunError::files(pack_dir, e))?;
    if !pack.broken.is_empty() || pack.tasks.is_empty() {
        return Err(CrucibleRunError::files(
            pack_dir,
            "the pack has broken tasks or none; fix it before sealing",
        ));
    }
    let hash = pack.hash(trials_per_task);
    let entries = archive_entries(pack_dir)?;
    let mut rng = ChaCha20Rng::from_os_rng();
    let sealed =
        seal(&entries, &hash, key, &mut rng).map_err(|e| CrucibleRunError::files(pack_dir, e))?;
    std::fs::create_dir_all(out_dir).map_err(|e| CrucibleRunError::files(out_dir, e))?;
    std::fs::create_dir_all(commitments_dir)
        .map_err(|e| CrucibleRunError::files(commitments_dir, e))?;
    let blob = out_dir.join(format!("{name}.sealed"));
    let state = out_dir.join(format!("{name}.seal-state.json"));
    let commitment = commitments_dir.join(format!("{name}.json"));
    for p in [&blob, &state, &commitment] {
        if p.exists() {
            return Err(CrucibleRunError::files(
                p,
                "already exists; a sealed pack is never overwritten",
            ));
        }
    }
    // A content a test-stage campaign has used is not sealed again, under any name.
    crate::crucible::holdouts::HoldoutLedger::for_this_machine().record_sealed(
        &pack,
        crate::crucible::holdouts::SealedCopy {
            name: name.to_string(),
            pack_hash: hash.to_string(),
            state: state.display().to_string(),
            sealed_at: chrono::Utc::now().to_rfc3339(),
            tasks: crate::datasets::split::entries_of(&pack, Default::default())
                .map_err(|e| CrucibleRunError::files(pack_dir, e))?,
        },
    )?;
    std::fs::write(&blob, &sealed.blob).map_err(|e| CrucibleRunError::files(&blob, e))?;
    let st = SealState::new(&sealed);
    write_atomic(
        &state,
        &serde_json::to_string_pretty(&st).map_err(|e| CrucibleRunError::files(&state, e))?,
    )?;
    let published = PublishedCommitment {
        schema: "geode.commitment.v1".into(),
        name: name.to_string(),
        commitment: sealed.commitment.clone(),
        pack_hash: sealed.pack_hash.clone(),
        trials_per_task,
        tasks: pack.tasks.len(),
    };
    write_atomic(
        &commitment,
        &serde_json::to_string_pretty(&published)
            .map_err(|e| CrucibleRunError::files(&commitment, e))?,
    )?;
    Ok(SealedFiles {
        blob,
        state,
        commitment,
        published,
    })
}

/// Read a seal state (`<name>.seal-state.json`) from `path`.
pub fn load_state(path: &Path) -> Result<SealState, CrucibleRunError> {
    let text = std::fs::read_to_string(path).map_err(|e| CrucibleRunError::files(path, e))?;
    serde_json::from_str(&text).map_err(|e| CrucibleRunError::files(path, e))
}

pub(crate) fn save_state(path: &Path, state: &SealState) -> Result<(), CrucibleRunError> {
    write_atomic(
        path,
        &serde_json::to_string_pretty(state).map_err(|e| CrucibleRunError::files(path, e))?,
    )
}

/// Write decrypted entries into `dir` (created fresh), keeping modes.
pub fn unpack(entries: &[ArchiveEntry], dir: &Path) -> Result<(), CrucibleRunError> {
    for e in entries {
        let rel = Path::new(&e.path);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(CrucibleRunError::files(
                rel,
                "archive entry escapes the pack folder",
            ));
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|err| CrucibleRunError::files(parent, err))?;
        }
        std::fs::write(&path, &e.bytes).map_err(|err| CrucibleRunError::files(&path, err))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode & 0o7777))
            .map_err(|err| CrucibleRunError::files(&path, err))?;
    }
    Ok(())
}
