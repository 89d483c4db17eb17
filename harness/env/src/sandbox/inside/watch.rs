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
    loop {
        let last = stop.load(Ordering::SeqCst);
        loop {
            // SAFETY: read into our buffer of its stated length.
            let n = unsafe { libc::read(fan.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let events = parse(&buf[..n as usize], mount, upper);
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

/// The events of a buffer.
fn parse(buf: &[u8], mount: &std::fs::File, upper: &Path) -> Vec<Event> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let event_len = u32_at(buf, at) as usize;
        let metadata_len = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) as usize;
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
                INFO_OLD_DFID_NAME => event.old = named_path(record, mount, upper),
                INFO_DFID_NAME | INFO_NEW_DFID_NAME => {
                    event.new = named_path(record, mount, upper);
                }
                _ => {}
            }
            info += len;
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
fn named_path(record: &[u8], mount: &std::fs::File, upper: &Path) -> Option<String> {
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
    // SAFETY: open_by_handle_at with a well-formed handle; the descriptor is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            handle.as_mut_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel returned this descriptor to us alone.
    let dir = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let dir_path = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
    let rel = dir_path.strip_prefix(upper).ok()?;
    let path: PathBuf = if name == "." || name.is_empty() {
        rel.to_path_buf()
    } else {
        rel.join(&name)
    };
    Some(path.to_string_lossy().into_owned())
}
