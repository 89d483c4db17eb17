//! Built-in tools (bash, files, search; `computer` lives in `tools::computer`).
//!
//! Handlers take their paths from the scope step's resolutions, and resolve again themselves if
//! one is missing, so a pipeline bug cannot turn into a write outside the workspace. Every
//! output is bounded, because whatever a tool returns is paid for again in each later model call.
//! Paths shown to the model are relative to the workspace root, the frame it addresses files in.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::policy::{PersonalDataClass, SafetyLevel};
use crate::tools::computer::ComputerTool;
use crate::tools::input::{input_schema, parse_input};
use crate::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};
use crate::tools::workspace::ExecRequest;

/// Bytes kept of stdout and of stderr each.
pub const BASH_OUTPUT_CAP: usize = 30_000;
const BASH_DEFAULT_TIMEOUT_SECS: u64 = 120;
const BASH_MAX_TIMEOUT_SECS: u64 = 3600;
/// Larger reads are cut; the model can page with offset/limit.
pub const READ_FILE_CAP: usize = 256 * 1024;
pub(crate) const GLOB_MAX_RESULTS: usize = 1000;
pub(crate) const GREP_MAX_MATCHES: usize = 500;
/// A minified file can put a megabyte on one line.
const GREP_LINE_CHARS: usize = 400;
/// Same heuristic as git and ripgrep: a NUL byte early on means binary.
const BINARY_SNIFF_BYTES: usize = 8192;

/// The built-in tools, bound as `builtin:<name>`.
pub fn builtin_tools() -> Vec<BoundTool> {
    fn bind(spec: ToolSpec, handler: Arc<dyn ToolHandler>) -> BoundTool {
        BoundTool {
            binding: format!("builtin:{}", spec.name),
            spec,
            handler,
        }
    }
    vec![
        bind(BashTool::spec(), Arc::new(BashTool)),
        bind(ReadFileTool::spec(), Arc::new(ReadFileTool)),
        bind(WriteFileTool::spec(), Arc::new(WriteFileTool)),
        bind(EditFileTool::spec(), Arc::new(EditFileTool)),
        bind(ListDirTool::spec(), Arc::new(ListDirTool)),
        bind(GlobTool::spec(), Arc::new(GlobTool)),
        bind(GrepTool::spec(), Arc::new(GrepTool)),
        bind(ComputerTool::spec(), Arc::new(ComputerTool)),
    ]
}

/// A spec for the tools that act on the file named by their `path` argument; `I` is the
/// tool's input type, whose schema the model is shown.
fn file_spec<I: JsonSchema>(
    name: &str,
    description: &str,
    safety: SafetyLevel,
    effectful: bool,
) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: input_schema::<I>(),
        safety,
        personal_data: PersonalDataClass::None,
        resource_keys: ResourceKeyRule::PathArgs,
        path_args: vec![PATH_ARG.to_string()],
        effectful,
        command_arg: None,
        deadline_arg: None,
    }
}

/// The argument the file tools name their file or directory in (their one path argument).
const PATH_ARG: &str = "path";

fn failed(e: impl std::fmt::Display) -> ToolOutput {
    ToolOutput::error(e.to_string())
}

/// The resolved path of the `path` argument (`raw` as the call gave it), resolving it here when
/// the scope step did not.
fn target_path(ctx: &ToolContext, raw: &str) -> Result<PathBuf, ToolOutput> {
    match ctx.path(PATH_ARG) {
        Some(path) => Ok(path.clone()),
        None => ctx.workspace.resolve(raw).map_err(failed),
    }
}

fn shown(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

fn floor_boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Parses the input into the tool's input type, runs `run` with it and folds its early-return
/// errors into the output the model reads.
macro_rules! handler {
    ($tool:ident, $input:ty) => {
        #[async_trait]
        impl ToolHandler for $tool {
            async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput {
                let input: $input = match parse_input(input) {
                    Ok(input) => input,
                    Err(e) => return ToolOutput::error(e.to_string()),
                };
                match self.run(input, ctx).await {
                    Ok(out) | Err(out) => out,
                }
            }
        }
    };
}

// Declared after `handler!` so the search tools can use the macro.
mod search;
mod web;
pub use search::{GlobInput, GlobTool, GrepInput, GrepTool};
pub use web::{WebFetchInput, WebFetchTool};

/// `bash -c` in the workspace root; the whole process group dies when the call ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct BashTool;

/// The input of `bash`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashInput {
    /// The command line.
    pub command: String,
    /// Kill the command after this many seconds (default 120).
    #[schemars(range(min = 1, max = BASH_MAX_TIMEOUT_SECS))]
    pub timeout_sec: Option<u64>,
    /// Only where commands run in a sandbox and this one cannot (it needs the network, or to
    /// write outside the workspace): why. The person is asked to approve it outside the
    /// sandbox.
    pub escalate: Option<String>,
}

/// The `bash` argument that asks to run outside the command sandbox.
pub const ESCALATE_ARG: &str = "escalate";

impl BashTool {
    pub(crate) fn spec() -> ToolSpec {
        ToolSpec {
            name: "bash".to_string(),
            description: "Run a shell command with `bash -c` in the workspace root. Returns \
                stdout, stderr and the exit code; each stream is cut at 30000 bytes. Every \
                process the command starts, background ones included, is killed when the call \
                ends, so nothing keeps running between calls. Prefer the file tools for reading, \
                searching and editing files."
                .to_string(),
            input_schema: input_schema::<BashInput>(),
            safety: SafetyLevel::Dangerous,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::Workspace,
            path_args: Vec::new(),
            effectful: true,
            command_arg: Some("command".to_string()),
            deadline_arg: Some("timeout_sec".to_string()),
        }
    }

    async fn run(&self, input: BashInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let secs = input
            .timeout_sec
            .unwrap_or(BASH_DEFAULT_TIMEOUT_SECS)
            .clamp(1, BASH_MAX_TIMEOUT_SECS);
        let timeout = Duration::from_secs(secs).min(ctx.deadline);
        let req = ExecRequest {
            command: input.command,
            cwd: None,
            timeout,
            output_cap: BASH_OUTPUT_CAP,
            env: Vec::new(),
        };
        // The approval step made a person approve an escalated call (see `escalation`).
        let out = if input.escalate.is_some() {
            ctx.workspace
                .exec_escalated(req, ctx.cancel.clone(), ctx.output.clone())
                .await
        } else {
            ctx.workspace
                .exec_live(req, ctx.cancel.clone(), ctx.output.clone())
                .await
        }
        .map_err(failed)?;
        let mut text = out.stdout;
        if !out.stderr.is_empty() {
            push_line(&mut text, "[stderr]");
            text.push_str(&out.stderr);
        }
        let status = match out.exit_code {
            _ if out.timed_out => {
                format!("[timed out after {timeout:?}; the process group was killed]")
            }
            _ if out.cancelled => "[cancelled; the process group was killed]".to_string(),
            Some(code) => format!("[exit code {code}]"),
            None => "[killed by a signal]".to_string(),
        };
        let is_error = out.timed_out || out.cancelled || out.exit_code != Some(0);
        push_line(&mut text, &status);
        Ok(ToolOutput {
            content: text,
            is_error,
            images: Vec::new(),
        })
    }
}
handler!(BashTool, BashInput);

/// Reads a text file, optionally a window of lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFileTool;

/// The input of `read_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// Relative to the workspace root.
    pub path: String,
    /// First line, 1-based.
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Number of lines.
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

impl ReadFileTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<ReadFileInput>(
            "read_file",
            "Read a text file in the workspace. `offset` (1-based line) and `limit` (lines) \
             select a window; output is cut at 256 KiB, so page through large files.",
            SafetyLevel::Safe,
            false,
        )
    }

    async fn run(&self, input: ReadFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let path = target_path(ctx, &input.path)?;
        let name = shown(ctx.workspace.root(), &path);
        let bytes = ctx.workspace.read_file(&path).await.map_err(failed)?;
        let text = String::from_utf8_lossy(&bytes);
        let (offset, limit) = (input.offset, input.limit);
        let mut body = if offset.is_none() && limit.is_none() {
            text.into_owned()
        } else {
            let skip = usize::try_from(offset.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
            let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
            let total = text.split_inclusive('\n').count();
            if skip >= total && skip > 0 {
                return Err(ToolOutput::error(format!(
                    "offset {} is past the end of {name} ({total} lines)",
                    skip + 1
                )));
            }
            text.split_inclusive('\n').skip(skip).take(take).collect()
        };
        if body.len() > READ_FILE_CAP {
            let note = format!(
                "[... cut at {READ_FILE_CAP} of {} bytes; read the rest with offset/limit ...]",
                body.len()
            );
            body.truncate(floor_boundary(&body, READ_FILE_CAP));
            push_line(&mut body, &note);
        }
        if body.is_empty() {
            body = format!("[{name} is empty]");
        }
        Ok(ToolOutput::ok(body))
    }
}
handler!(ReadFileTool, ReadFileInput);

/// Creates or overwrites a file, creating parent directories.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFileTool;

/// The input of `write_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// Relative to the workspace root.
    pub path: String,
    /// The complete new contents.
    pub content: String,
}

impl WriteFileTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<WriteFileInput>(
            "write_file",
            "Create or overwrite a file in the workspace with `content`; parent directories are \
             created. Use edit_file to change part of an existing file.",
            SafetyLevel::Write,
            true,
        )
    }

    async fn run(
        &self,
        input: WriteFileInput,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolOutput> {
        let content = input.content;
        let path = target_path(ctx, &input.path)?;
        ctx.workspace
            .write_file(&path, content.as_bytes())
            .await
            .map_err(failed)?;
        Ok(ToolOutput::ok(format!(
            "wrote {} bytes to {}",
            content.len(),
            shown(ctx.workspace.root(), &path)
        )))
    }
}
handler!(WriteFileTool, WriteFileInput);

/// Exact-string replacement. Ambiguity fails instead of guessing, so an edit never lands on a
/// place the model did not mean.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditFileTool;

/// The input of `edit_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// Relative to the workspace root.
    pub path: String,
    /// The exact text to replace.
    pub old_string: String,
    /// The replacement text.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

impl EditFileTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<EditFileInput>(
            "edit_file",
            "Replace `old_string` with `new_string` in a file. `old_string` must match exactly \
             (whitespace included) and occur exactly once, unless `replace_all` is true; include \
             enough surrounding lines to make it unique. On failure the file is left unchanged.",
            SafetyLevel::Write,
            true,
        )
    }

    async fn run(&self, input: EditFileInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let (old, new) = (input.old_string.as_str(), input.new_string.as_str());
        let replace_all = input.replace_all;
        if old.is_empty() {
            return Err(ToolOutput::error("old_string must not be empty"));
        }
        if old == new {
            return Err(ToolOutput::error("old_string and new_string are identical"));
        }
        let path = target_path(ctx, &input.path)?;
        let name = shown(ctx.workspace.root(), &path);
        let bytes = ctx.workspace.read_file(&path).await.map_err(failed)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolOutput::error(format!(
                "{name} is not valid UTF-8; edit_file only edits text"
            ))
        })?;
        let count = text.matches(old).count();
        if count == 0 {
            return Err(ToolOutput::error(format!(
                "old_string not found in {name} (0 matches); the file is unchanged"
            )));
        }
        if count > 1 && !replace_all {
            return Err(ToolOutput::error(format!(
                "old_string occurs {count} times in {name}; add surrounding context to make it \
                 unique, or set replace_all. The file is unchanged."
            )));
        }
        // `count` counts the same non-overlapping matches `replacen` replaces.
        let edited = text.replacen(old, new, if replace_all { count } else { 1 });
        ctx.workspace
            .write_file(&path, edited.as_bytes())
            .await
            .map_err(failed)?;
        let plural = if count == 1 { "" } else { "s" };
        Ok(ToolOutput::ok(format!(
            "replaced {count} occurrence{plural} in {name}"
        )))
    }
}
handler!(EditFileTool, EditFileInput);

/// One directory level, dirs marked with a trailing `/`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListDirTool;

/// The input of `list_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirInput {
    /// Relative to the workspace root; default `.`.
    pub path: Option<String>,
}

impl ListDirTool {
    pub(crate) fn spec() -> ToolSpec {
        file_spec::<ListDirInput>(
            "list_dir",
            "List one directory of the workspace (default: the root), one entry per line; \
             directories end with `/`.",
            SafetyLevel::Safe,
            false,
        )
    }

    async fn run(&self, input: ListDirInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let path = target_path(ctx, input.path.as_deref().unwrap_or("."))?;
        let entries = ctx.workspace.list_dir(&path).await.map_err(failed)?;
        if entries.is_empty() {
            return Ok(ToolOutput::ok(format!(
                "[{} is empty]",
                shown(ctx.workspace.root(), &path)
            )));
        }
        let mut text = String::new();
        for entry in entries {
            let slash = if entry.is_dir { "/" } else { "" };
            push_line(&mut text, &format!("{}{slash}", entry.name));
        }
        Ok(ToolOutput::ok(text))
    }
}
handler!(ListDirTool, ListDirInput);
