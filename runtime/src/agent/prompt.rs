//! The system prompt, rebuilt every round from declared sources: the scaffold's static sections,
//! then a `<dynamic_context>` block (date, plan and reflection hints, runtime hints). The
//! conversation travels separately.

use sha2::{Digest, Sha256};

/// Everything that goes into one round's system prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptSources<'a> {
    pub sections: &'a [String],
    /// `YYYY-MM-DD`, injected so tests are deterministic.
    pub date: &'a str,
    pub cognitive_hints: Vec<String>,
    pub runtime_hints: &'a [String],
}

pub fn build_system_prompt(src: &PromptSources<'_>) -> String {
    let mut out = src.sections.join("\n\n");
    out.push_str("\n\n<dynamic_context>\n");
    out.push_str(&format!("date: {}\n", src.date));
    for h in src.cognitive_hints.iter().chain(src.runtime_hints) {
        out.push_str(h);
        out.push('\n');
    }
    out.push_str("</dynamic_context>");
    out
}

/// Recorded per turn so a result can name the prompt it was produced under.
pub fn prompt_hash(prompt: &str) -> String {
    hex::encode(Sha256::digest(prompt.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_go_into_the_dynamic_block() {
        let sections = vec!["static".to_string()];
        let hints = vec!["be brief".to_string()];
        let p = build_system_prompt(&PromptSources {
            sections: &sections,
            date: "2026-11-30",
            cognitive_hints: vec!["Plan: x".into()],
            runtime_hints: &hints,
        });
        assert!(
            p.starts_with("static\n\n<dynamic_context>\ndate: 2026-11-30\nPlan: x\nbe brief\n")
        );
        assert_eq!(prompt_hash(&p).len(), 64);
    }
}
