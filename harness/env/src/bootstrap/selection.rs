//! Which packages a slim image is made of, read from the archive's `Packages` indexes (the
//! essential set, the required ones, apt), and the names and versions of the `.deb` files
//! apt fetched for them.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::root::{Root, io_err};
use super::{ARCH, BootstrapError};

/// The package names a slim image starts from, read from `Packages` indexes.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Selection {
    pub(super) essential: BTreeSet<String>,
    pub(super) required: BTreeSet<String>,
    /// Every package name of the architecture (to know whether `usr-is-merged` exists).
    pub(super) known: BTreeSet<String>,
}

impl Selection {
    /// Feed one `Packages` index (a sequence of deb822 stanzas).
    pub(super) fn scan(&mut self, index: &str) {
        let mut stanza = Stanza::default();
        for line in index.lines() {
            if line.trim().is_empty() {
                self.take(std::mem::take(&mut stanza));
            } else {
                stanza.line(line);
            }
        }
        self.take(stanza);
    }

    pub(super) fn take(&mut self, stanza: Stanza) {
        let Some(name) = stanza.package else { return };
        // A Packages file of binary-amd64 lists `all` packages too; anything else does not
        // run here.
        if !matches!(stanza.architecture.as_deref(), Some(ARCH) | Some("all")) {
            return;
        }
        if stanza.essential {
            self.essential.insert(name.clone());
        }
        if stanza.required {
            self.required.insert(name.clone());
        }
        self.known.insert(name);
    }

    /// The two requests: the essential set, and everything (essential, required, apt).
    ///
    /// `usr-is-merged` joins the essential set when the archive has it: init-system-helpers
    /// depends on `usrmerge | usr-is-merged`, and apt, with nothing installed, picks the
    /// first, which drags in perl to convert a system that is already merged.
    pub(super) fn requests(&self) -> Result<(Vec<String>, Vec<String>), BootstrapError> {
        let missing = |what: &str| BootstrapError::Invalid {
            path: PathBuf::from("/var/lib/apt/lists"),
            message: format!("the Packages indexes have {what}"),
        };
        if self.essential.is_empty() {
            return Err(missing("no Essential: yes package"));
        }
        if !self.known.contains("apt") {
            return Err(missing("no apt package"));
        }
        let mut essential = self.essential.clone();
        if self.known.contains("usr-is-merged") {
            essential.insert("usr-is-merged".to_string());
        }
        let mut all = essential.clone();
        all.extend(self.required.iter().cloned());
        all.insert("apt".to_string());
        Ok((essential.into_iter().collect(), all.into_iter().collect()))
    }
}

/// The fields of one index stanza that matter here.
#[derive(Debug, Default)]
pub(super) struct Stanza {
    pub(super) package: Option<String>,
    pub(super) architecture: Option<String>,
    pub(super) essential: bool,
    pub(super) required: bool,
}

impl Stanza {
    pub(super) fn line(&mut self, line: &str) {
        // Continuation lines (descriptions, long Depends) start with white space.
        if line.starts_with([' ', '\t']) {
            return;
        }
        let Some((field, value)) = line.split_once(':') else {
            return;
        };
        let value = value.trim();
        // deb822 field names are case-insensitive.
        match field.to_ascii_lowercase().as_str() {
            "package" => self.package = Some(value.to_string()),
            "architecture" => self.architecture = Some(value.to_string()),
            "essential" => self.essential = value.eq_ignore_ascii_case("yes"),
            "priority" => self.required = value.eq_ignore_ascii_case("required"),
            _ => {}
        }
    }
}

pub(super) async fn scan_indexes(root: &Root) -> Result<Selection, BootstrapError> {
    let lists = root.host("/var/lib/apt/lists");
    let mut entries = tokio::fs::read_dir(&lists)
        .await
        .map_err(io_err("read", &lists))?;
    let mut selection = Selection::default();
    let mut indexes = 0;
    while let Some(entry) = entries.next_entry().await.map_err(io_err("read", &lists))? {
        let name = entry.file_name();
        if !name.to_string_lossy().ends_with("_Packages") {
            continue;
        }
        let path = entry.path();
        let text = tokio::fs::read(&path)
            .await
            .map_err(io_err("read", &path))?;
        selection.scan(&String::from_utf8_lossy(&text));
        indexes += 1;
    }
    if indexes == 0 {
        return Err(BootstrapError::Invalid {
            path: lists,
            message: "apt-get update left no Packages index".into(),
        });
    }
    Ok(selection)
}

/// How many files `apt-get install --print-uris` would fetch, and their total size.
pub(super) fn download_size(print_uris: &str) -> (usize, u64) {
    let mut count = 0;
    let mut bytes = 0;
    for line in print_uris.lines().filter(|l| l.starts_with('\'')) {
        // 'URI' file size hash
        let mut fields = line.split_whitespace();
        count += 1;
        bytes += fields
            .nth(2)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (count, bytes)
}

/// `name_version_arch.deb` as apt names its downloads (an epoch's `:` as `%3a`) to
/// `(name, version)`.
pub(super) fn parse_deb_filename(file: &str) -> Option<(String, String)> {
    let stem = file.strip_suffix(".deb")?;
    let mut parts = stem.split('_');
    let (name, version, arch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || name.is_empty() || version.is_empty() || arch.is_empty() {
        return None;
    }
    Some((name.to_string(), percent_decode(version)?))
}

pub(super) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `name=version` of every downloaded `.deb` (paths inside the image), sorted by name.
pub(super) fn pinned_versions<'a>(
    root: &Root,
    debs: impl Iterator<Item = &'a String>,
) -> Result<Vec<String>, BootstrapError> {
    let mut packages = Vec::new();
    for deb in debs {
        let file = deb.rsplit('/').next().unwrap_or(deb);
        let (name, version) = parse_deb_filename(file).ok_or_else(|| BootstrapError::Invalid {
            path: root.host(deb),
            message: "not a name_version_arch.deb file name".into(),
        })?;
        packages.push(format!("{name}={version}"));
    }
    packages.sort();
    Ok(packages)
}
