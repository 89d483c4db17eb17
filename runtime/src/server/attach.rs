//! `@path` in a person's prompt attaches the file, as in Claude Code: each `@word` that names a
//! text file in the workspace is appended to the prompt as a `<file>` block, so the model reads
//! it without a tool call. A word that names nothing there (an address, a handle, a path
//! outside the workspace) is left as the person typed it.

use crate::tools::workspace::Workspace;

/// Bytes of one attached file; the rest is cut with a visible marker.
const FILE_CAP: usize = 100 * 1024;
/// A NUL byte early on means binary, which is not attached.
const SNIFF: usize = 8192;

/// `prompt` with the files its `@path` words name appended.
pub async fn attach_files(prompt: &str, ws: &dyn Workspace) -> String {
    let mut attached: Vec<String> = Vec::new();
    let mut blocks = String::new();
    for word in prompt.split_whitespace() {
        let Some(path) = word
            .strip_prefix('@')
            .map(|p| p.trim_end_matches([',', '.', ';', ':', '!', '?', ')', '"', '\'']))
            .filter(|p| !p.is_empty())
        else {
            continue;
        };
        if attached.iter().any(|a| a == path) {
            continue;
        }
        let Ok(resolved) = ws.resolve(path) else {
            continue;
        };
        if !tokio::fs::metadata(&resolved)
            .await
            .is_ok_and(|m| m.is_file())
        {
            continue;
        }
        let Ok(bytes) = ws.read_file(&resolved).await else {
            continue;
        };
        if bytes[..bytes.len().min(SNIFF)].contains(&0) {
            continue;
        }
        let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(FILE_CAP)]).into_owned();
        if bytes.len() > FILE_CAP {
            text.push_str(&format!(
                "\n[... cut at {FILE_CAP} of {} bytes; read_file reads the rest ...]",
                bytes.len()
            ));
        }
        blocks.push_str(&format!("\n\n<file path=\"{path}\">\n{text}\n</file>"));
        attached.push(path.to_string());
    }
    format!("{prompt}{blocks}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::tools::workspace::LocalWorkspace;

    #[tokio::test]
    async fn named_text_files_are_attached_once_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.md"), "the notes").unwrap();
        std::fs::write(dir.path().join("blob.bin"), b"a\0b").unwrap();
        let ws = LocalWorkspace::new(dir.path()).unwrap();
        let out = attach_files(
            "read @notes.md, then @notes.md again; mail me@example.com, @blob.bin, @/etc/passwd",
            &ws,
        )
        .await;
        assert_eq!(
            out,
            "read @notes.md, then @notes.md again; mail me@example.com, @blob.bin, @/etc/passwd\
             \n\n<file path=\"notes.md\">\nthe notes\n</file>"
        );
    }
}
