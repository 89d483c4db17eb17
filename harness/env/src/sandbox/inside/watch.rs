//! What is written to the trial's writable layer while the verifier runs: a fanotify watch on
//! the trial disk's whole file system, naming every entry created, written, moved, deleted or
//! re-permissioned there. The two judgments of the layer (at the hand-over and after the
//! verifier) see only what is there at those moments; a process the agent left running could
//! plant a wrapper between them and remove it before the second. The watch sees it happen.
//!
//! Events are read in file-handle mode (`FAN_REPORT_DFID_NAME`: the folder's handle and the
//! entry's name), the only mode that reports creations, moves and deletions; a folder's handle
//! is opened through the layer's mount to learn its path. The kernel interface has no wrapper
//! in the crates this project uses, which is why this module (with `views` and `disk`) may use
//! `unsafe`.
#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const FAN_CLOEXEC: libc::c_uint = 0x1;
const FAN_NONBLOCK: libc::c_uint = 0x2;
const FAN_REPORT_DFID_NAME: libc::c_uint = 0x400 | 0x800;
const FAN_MARK_ADD: libc::c_uint = 0x1;
const FAN_MARK_FILESYSTEM: libc::c_uint = 0x100;
const FAN_EVENTS: u64 = 0x2 // modify
    | 0x4 // attrib
    | 0x8 // close after write
    | 0x100 // create
    | 0x200 // delete
    | 0x1000_0000 // rename, old and new name in one event
    | 0x4000_0000; // on folders too
const INFO_DFID_NAME: u8 = 2;
const INFO_OLD_DFID_NAME: u8 = 10;
const INFO_NEW_DFID_NAME: u8 = 12;
/// `struct fanotify_event_metadata`: event_len u32, vers u8, reserved u8, metadata_len u16,
/// mask u64, fd i32, pid i32.
const METADATA_LEN: usize = 24;
/// Names kept at most: a verifier that installs a toolchain touches many files, and only the
/// verifier's inputs among them are named.
const MAX_SEEN: usize = 100_000;

/// A running watch of the layer `upper` (a folder on the trial's disk, seen at `upper` in this
/// process's mount namespace).
pub(crate) struct LayerWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// What a watch saw: every path touched, and where renamed entries went.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) touched: BTreeSet<String>,
    /// Old path -> new path, the last rename of each.
    pub(crate) renamed: std::collections::BTreeMap<String, String>,
}

impl LayerWatch {
    pub(crate) fn start(upper: &Path) -> std::io::Result<LayerWatch> {
        // SAFETY: fanotify_init with flag arguments; the descriptor is owned below.
        let fd = unsafe {
            libc::fanotify_init(
                FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME,
                (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by the kernel and is ours alone.
        let fan = unsafe { OwnedFd::from_raw_fd(fd) };
        let at = cstring(upper)?;
        // SAFETY: fanotify_mark on our descriptor with a NUL-terminated path.
        let marked = unsafe {
            libc::fanotify_mark(
                fan.as_raw_fd(),
                FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
                FAN_EVENTS,
                libc::AT_FDCWD,
                at.as_ptr(),
            )
        };
        if marked != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mount = std::fs::File::open(upper)?;
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let reader = {
            let (stop, seen, upper) = (Arc::clone(&stop), Arc::clone(&seen), upper.to_path_buf());
            std::thread::Builder::new()
                .name("layer-watch".into())
                .spawn(move || read_events(&fan, &mount, &upper, &stop, &seen))?
        };
        Ok(LayerWatch {
            stop,
            seen,
            reader: Some(reader),
        })
    }

    /// Stop, read what is still queued, and give what was seen (paths relative to the layer,
    /// `usr/local/bin/cat`).
    pub(crate) fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::take(&mut *seen)
    }
}

fn cstring(path: &Path) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other(format!("NUL in {}", path.display())))
}

/// Until `stop`, then once more for what was queued before it: every event's path under
/// `upper` into `seen`.
fn read_events(
    fan: &OwnedFd,
    mount: &std::fs::File,
    upper: &Path,
    stop: &AtomicBool,
    seen: &Mutex<Seen>,
) {
    let mut buf = vec![0u8; 64 << 10];
    let mut resolver = Resolver {
        mount,
        upper,
        by_handle: None,
        walked: false,
    };
    loop {
        let last = stop.load(Ordering::SeqCst);
        loop {
            // SAFETY: read into our buffer of its stated length.
            let n = unsafe { libc::read(fan.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            resolver.walked = false;
            let events = parse(&buf[..n as usize], &mut resolver);
            let mut seen = match seen.lock() {
                Ok(seen) => seen,
                Err(poisoned) => poisoned.into_inner(),
            };
            for event in events {
                if seen.touched.len() >= MAX_SEEN {
                    break;
                }
                seen.touched
                    .extend(event.old.iter().chain(&event.new).cloned());
                if let (Some(old), Some(new)) = (event.old, event.new) {
                    seen.renamed.insert(old, new);
                }
            }
        }
        if last {
            return;
        }
        let mut pfd = libc::pollfd {
            fd: fan.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we own, with a timeout.
        unsafe { libc::poll(&mut pfd, 1, 50) };
    }
}

/// One event's paths (relative to `upper`): `new` alone for most, `old` and `new` for a rename
/// (either side `None` when outside `upper`: the overlay's work folder, the logs folders).
struct Event {
    old: Option<String>,
    new: Option<String>,
}

/// How a folder's handle in an event becomes its path. `open_by_handle_at` needs
/// CAP_DAC_READ_SEARCH over the machine, which root of a user namespace (the rootless
/// sandbox) lacks; there the handles of the layer's folders are looked up in a table made
/// with `name_to_handle_at`, which anyone may call: the layer walked when a handle is not in
/// it yet, and each folder an event creates or moves added as its event is read. A folder
/// made and removed again before either cannot be named.
struct Resolver<'a> {
    mount: &'a std::fs::File,
    upper: &'a Path,
    /// `None` while `open_by_handle_at` works; the table (handle type and bytes -> the
    /// folder's path relative to `upper`) once it has been refused.
    by_handle: Option<std::collections::HashMap<Vec<u8>, PathBuf>>,
    /// The table was walked for this buffer already.
    walked: bool,
}

/// `struct file_handle` with room for any handle: bytes (u32), type (i32), then the handle.
const MAX_HANDLE: usize = 128;

impl Resolver<'_> {
    /// The folder of `handle` (type and bytes as an event gives them, at `raw`, a `struct
    /// file_handle`), relative to `upper`.
    fn folder(&mut self, raw: &mut [u64], key: &[u8]) -> Option<PathBuf> {
        if self.by_handle.is_none() {
            // SAFETY: open_by_handle_at with a well-formed handle; the descriptor is owned below.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_open_by_handle_at,
                    self.mount.as_raw_fd(),
                    raw.as_mut_ptr(),
                    libc::O_PATH | libc::O_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: the kernel returned this descriptor to us alone.
                let dir = unsafe { OwnedFd::from_raw_fd(fd as i32) };
                let path = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
                return path.strip_prefix(self.upper).ok().map(Path::to_path_buf);
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
                return None;
            }
            self.by_handle = Some(std::collections::HashMap::new());
        }
        if let Some(found) = self.by_handle.as_ref().and_then(|t| t.get(key)) {
            return Some(found.clone());
        }
        if self.walked {
            return None;
        }
        self.walked = true;
        let mut table = std::collections::HashMap::new();
        for entry in walkdir::WalkDir::new(self.upper)
            .follow_links(false)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_dir())
        {
            if let (Some(handle), Ok(rel)) = (
                handle_of(entry.path()),
                entry.path().strip_prefix(self.upper),
            ) {
                table.insert(handle, rel.to_path_buf());
            }
        }
        let found = table.get(key).cloned();
        self.by_handle = Some(table);
        found
    }

    /// A folder an event made (or moved) at `rel`: into the table while it is there to ask.
    fn learn(&mut self, rel: &str) {
        if let Some(table) = self.by_handle.as_mut()
            && let Some(handle) = handle_of(&self.upper.join(rel))
        {
            table.insert(handle, PathBuf::from(rel));
        }
    }
}

/// `name_to_handle_at` of `path` (never following a link): the handle's type and bytes, as
/// fanotify reports them.
fn handle_of(path: &Path) -> Option<Vec<u8>> {
    let at = cstring(path).ok()?;
    let mut raw = [0u64; 1 + MAX_HANDLE / 8];
    // handle_bytes: the room there is.
    raw[0] = MAX_HANDLE as u64;
    let mut mount_id: libc::c_int = 0;
    // SAFETY: name_to_handle_at into a buffer of the stated room, a NUL-terminated path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            at.as_ptr(),
            raw.as_mut_ptr(),
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: the buffer is `raw`'s bytes, all initialised.
    let bytes: &[u8] = unsafe {
        std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), std::mem::size_of_val(&raw))
    };
    let len = u32_at(bytes, 0) as usize;
    bytes.get(4..8 + len).map(<[u8]>::to_vec)
}

/// fanotify's mask bits for an entry made or moved in, and for a folder.
const FAN_CREATE: u64 = 0x100;
const FAN_RENAME: u64 = 0x1000_0000;
const FAN_ONDIR: u64 = 0x4000_0000;

/// The events of a buffer.
fn parse(buf: &[u8], resolver: &mut Resolver<'_>) -> Vec<Event> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let event_len = u32_at(buf, at) as usize;
        let metadata_len = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) as usize;
        let mask = u64::from_ne_bytes(buf[at + 8..at + 16].try_into().unwrap_or([0; 8]));
        if event_len < METADATA_LEN || at + event_len > buf.len() {
            break;
        }
        let mut info = at + metadata_len;
        let mut event = Event {
            old: None,
            new: None,
        };
        while info + 4 <= at + event_len {
            let kind = buf[info];
            let len = u16::from_ne_bytes([buf[info + 2], buf[info + 3]]) as usize;
            if len < 4 || info + len > at + event_len {
                break;
            }
            let record = &buf[info..info + len];
            match kind {
                INFO_OLD_DFID_NAME => event.old = named_path(record, resolver),
                INFO_DFID_NAME | INFO_NEW_DFID_NAME => {
                    event.new = named_path(record, resolver);
                }
                _ => {}
            }
            info += len;
        }
        if mask & FAN_ONDIR != 0
            && mask & (FAN_CREATE | FAN_RENAME) != 0
            && let Some(new) = &event.new
        {
            resolver.learn(new);
        }
        if event.old.is_some() || event.new.is_some() {
            out.push(event);
        }
        at += event_len;
    }
    out
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// One `DFID_NAME` record: header (4), fsid (8), `struct file_handle` (handle_bytes u32,
/// handle_type i32, the handle), then the entry's name, NUL-terminated.
fn named_path(record: &[u8], resolver: &mut Resolver<'_>) -> Option<String> {
    const HANDLE_AT: usize = 4 + 8;
    let handle_bytes = u32_at(record, HANDLE_AT) as usize;
    let handle_end = HANDLE_AT + 8 + handle_bytes;
    if handle_end > record.len() {
        return None;
    }
    let name_bytes = &record[handle_end..];
    let name_len = name_bytes.iter().position(|&b| b == 0)?;
    let name = String::from_utf8_lossy(&name_bytes[..name_len]).into_owned();
    // The handle, copied into storage aligned for `struct file_handle`.
    let mut handle = vec![0u64; (8 + handle_bytes).div_ceil(8)];
    // SAFETY: both ranges are in bounds (checked above) and do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            record[HANDLE_AT..handle_end].as_ptr(),
            handle.as_mut_ptr().cast::<u8>(),
            8 + handle_bytes,
        );
    }
    let rel = resolver.folder(&mut handle, &record[HANDLE_AT + 4..handle_end])?;
    let path: PathBuf = if name == "." || name.is_empty() {
        rel
    } else {
        rel.join(&name)
    };
    Some(path.to_string_lossy().into_owned())
}
