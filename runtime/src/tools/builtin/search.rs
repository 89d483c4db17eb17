//! The search tools (glob, grep) and the bounded directory walk they share. They are the
//! tools that read many files, so the walk's deadline, cancellation and `.git` skip live here
//! with them rather than among the single-file tools.

use std::path::Path;
use std::time::Instant;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{
    BINARY_SNIFF_BYTES, GLOB_MAX_RESULTS, GREP_LINE_CHARS, GREP_MAX_MATCHES, file_spec,
    floor_boundary, push_line, shown, target_path,
};
use crate::policy::SafetyLevel;
use crate::tools::input::parse_input;
use crate::tools::plan::{ToolContext, ToolHandler, ToolOutput, ToolSpec};

/// Walks `base` in name order without following symlinks or entering `.git`, calling `visit` on
/// every non-directory until it returns false. Returns why it stopped early, as a marker line.
fn walk(
    base: &Path,
    cancel: &CancellationToken,
    deadline: Instant,
    mut visit: impl FnMut(&walkdir::DirEntry) -> bool,
) -> Option<&'static str> {
    let entries = walkdir::WalkDir::new(base)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !(e.depth() > 0 && e.file_type().is_dir() && e.file_name() == ".git"));
    for entry in entries {
        if cancel.is_cancelled() {
            return Some("[... search cancelled; results are partial ...]");
        }
        if Instant::now() >= deadline {
            return Some("[... search stopped at the deadline; results are partial ...]");
        }
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_dir() {
            continue;
        }
        if !visit(&entry) {
            break;
        }
    }
    None
}

fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, ToolOutput> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolOutput::error(format!("invalid glob pattern: {e}")))
}

/// Search results, then the notes saying why they may be incomplete.
fn listing(lines: &[String], notes: [Option<String>; 2]) -> ToolOutput {
    let mut text = lines.join("\n");
    for note in notes.iter().flatten() {
        push_line(&mut text, note);
    }
    ToolOutput::ok(text)
}

/// Runs a blocking walk off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolOutput> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolOutput::error(format!("search failed: {e}")))
}

/// Finds files by glob pattern, matched against paths relative to the searched directory.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobTool;

/// The input of `glob`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// Glob pattern.
    pub pattern: String,
    /// Directory to search; default `.`.
    pub path: Option<String>,
}

impl GlobTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<GlobInput>(
            "glob",
            "Find files whose path (relative to `path`, default the workspace root) matches a \
             glob such as `**/*.rs` or `src/*.toml`; `*` does not cross `/`. Symlinks are not \
             followed and `.git` is skipped. At most 1000 paths, sorted.",
            SafetyLevel::Safe,
            false,
        )
    }

    async fn run(&self, input: GlobInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let pattern = input.pattern;
        let matcher = compile_glob(&pattern)?;
        let base = target_path(ctx, input.path.as_deref().unwrap_or("."))?;
        let root = ctx.workspace.root().to_path_buf();
        let (cancel, deadline) = (ctx.cancel.clone(), Instant::now() + ctx.deadline);
        let where_ = shown(&root, &base);
        let (mut found, stopped) = blocking(move || {
            let mut found = Vec::new();
            let stopped = walk(&base, &cancel, deadline, |entry| {
                if let Ok(rel) = entry.path().strip_prefix(&base)
                    && matcher.is_match(rel)
                {
                    found.push(shown(&root, entry.path()));
                }
                true
            });
            (found, stopped)
        })
        .await?;
        if found.is_empty() && stopped.is_none() {
            return Ok(ToolOutput::ok(format!(
                "no files match `{pattern}` under {where_}"
            )));
        }
        found.sort();
        let hidden = found.len().saturating_sub(GLOB_MAX_RESULTS);
        found.truncate(GLOB_MAX_RESULTS);
        let more = (hidden > 0).then(|| {
            format!("[... {hidden} more matches not shown (limit {GLOB_MAX_RESULTS}); narrow the pattern ...]")
        });
        Ok(listing(&found, [more, stopped.map(str::to_string)]))
    }
}
handler!(GlobTool, GlobInput);

/// Regex search over text files.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrepTool;

/// The input of `grep`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// Regular expression.
    pub pattern: String,
    /// File or directory; default `.`.
    pub path: Option<String>,
    /// Only search files matching this glob, e.g. `*.rs`.
    pub glob: Option<String>,
}

impl GrepTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<GrepInput>(
            "grep",
            "Search file contents with a regular expression (Rust regex syntax) under `path` \
             (a directory or file; default the workspace root). `glob` filters files: a pattern \
             without `/` matches file names, one with `/` matches paths relative to `path`. \
             Prints `path:line: text`, at most 500 matches; binary files and `.git` are skipped.",
            SafetyLevel::Safe,
            false,
        )
    }

    async fn run(&self, input: GrepInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let pattern = input.pattern;
        let regex = regex::Regex::new(&pattern)
            .map_err(|e| ToolOutput::error(format!("invalid regex: {e}")))?;
        let filter = match input.glob.as_deref() {
            Some(g) => Some((compile_glob(g)?, g.contains('/'))),
            None => None,
        };
        let base = target_path(ctx, input.path.as_deref().unwrap_or("."))?;
        let root = ctx.workspace.root().to_path_buf();
        let (cancel, deadline) = (ctx.cancel.clone(), Instant::now() + ctx.deadline);
        let where_ = shown(&root, &base);
        let (lines, capped, stopped) = blocking(move || {
            let mut lines: Vec<String> = Vec::new();
            let mut capped = false;
            let stopped = walk(&base, &cancel, deadline, |entry| {
                // Symlinked files are skipped: their target may lie outside the workspace.
                if !entry.file_type().is_file() {
                    return true;
                }
                if let Some((glob, by_path)) = &filter {
                    let subject = if *by_path {
                        entry.path().strip_prefix(&base).unwrap_or(entry.path())
                    } else {
                        Path::new(entry.file_name())
                    };
                    if !glob.is_match(subject) {
                        return true;
                    }
                }
                let Ok(bytes) = std::fs::read(entry.path()) else {
                    return true;
                };
                if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
                    return true;
                }
                let name = shown(&root, entry.path());
                let text = String::from_utf8_lossy(&bytes);
                for (i, line) in text.lines().enumerate() {
                    if !regex.is_match(line) {
                        continue;
                    }
                    if lines.len() == GREP_MAX_MATCHES {
                        capped = true;
                        return false;
                    }
                    let cut = floor_boundary(line, GREP_LINE_CHARS);
                    let more = if cut < line.len() { " [...]" } else { "" };
                    lines.push(format!("{name}:{}: {}{more}", i + 1, &line[..cut]));
                }
                true
            });
            (lines, capped, stopped)
        })
        .await?;
        if lines.is_empty() && stopped.is_none() {
            return Ok(ToolOutput::ok(format!(
                "no matches for `{pattern}` under {where_}"
            )));
        }
        let more = capped.then(|| {
            format!(
                "[... stopped at {GREP_MAX_MATCHES} matches; narrow the pattern, path or glob ...]"
            )
        });
        Ok(listing(&lines, [more, stopped.map(str::to_string)]))
    }
}
handler!(GrepTool, GrepInput);
