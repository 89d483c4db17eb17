//! What `/rewind`'s records cost a person session's shell command, on a real tree in a temp
//! directory: 2,000 files of 4 KiB in 40 folders (a mid-sized project).
//!
//! - `rewind/watch_2000_files_one_changed`: `before` + `after` around a command that changes
//!   one file, once the baseline exists: what every command after the first pays (a walk with
//!   a stat per file, one file read and kept, one change row).
//! - `rewind/first_watch_2000_files`: the first command of a session, which also keeps every
//!   file (a fresh blob store each time).
//! - `rewind/edit_one_file`: an edit's `before` + `after` on the one file it names.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use geode_runtime::store::rewind::{FileHistory, RewindStore};

fn tree(root: &Path) {
    for d in 0..40 {
        let dir = root.join(format!("src{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..50 {
            let body = format!("// file {d}/{f}\n").repeat(400);
            std::fs::write(dir.join(format!("m{f}.rs")), &body[..4096]).unwrap();
        }
    }
}

fn history(ws: &Path, records: &Path) -> FileHistory {
    let store = Arc::new(RewindStore::open(records).unwrap());
    FileHistory::new(store, ws, vec![records.to_path_buf()])
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rewind");
    g.measurement_time(Duration::from_secs(8));
    let ws = tempfile::tempdir().unwrap();
    tree(ws.path());
    let target = ws.path().join("src7/m3.rs");

    let records = tempfile::tempdir().unwrap();
    let h = history(ws.path(), records.path());
    h.after(h.before(None).unwrap(), 1, "warm", "bash").unwrap();
    let mut n = 0u64;
    g.bench_function("watch_2000_files_one_changed", |b| {
        b.iter(|| {
            n += 1;
            let watch = h.before(None).unwrap();
            std::fs::write(&target, format!("change {n}\n")).unwrap();
            h.after(watch, 1, "c", "bash").unwrap()
        })
    });
    g.bench_function("edit_one_file", |b| {
        b.iter(|| {
            n += 1;
            let watch = h.before(Some(std::slice::from_ref(&target))).unwrap();
            std::fs::write(&target, format!("edit {n}\n")).unwrap();
            h.after(watch, 1, "e", "edit_file").unwrap()
        })
    });
    g.sample_size(10);
    g.bench_function("first_watch_2000_files", |b| {
        b.iter(|| {
            let records = tempfile::tempdir().unwrap();
            let h = history(ws.path(), records.path());
            let watch = h.before(None).unwrap();
            h.after(watch, 1, "c", "bash").unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
