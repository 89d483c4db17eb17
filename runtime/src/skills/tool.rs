//! `load_skill`: the model asks for a skill by name and reads its instructions, so only the
//! skills a task needs cost context. The files beside `SKILL.md` are listed by path, for the
//! model to read with `read_file` through the normal pipeline (scope, hooks, timeline).

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{SKILL_FILE, SkillSet};
use crate::policy::{PersonalDataClass, SafetyLevel};
use crate::tools::input::{input_schema, parse_input};
use crate::tools::plan::{
    BoundTool, ResourceKeyRule, ToolContext, ToolHandler, ToolOutput, ToolSpec,
};

pub(crate) const LOAD_SKILL_TOOL: &str = "load_skill";

/// The input of `load_skill`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSkillInput {
    /// The skill's name, as the system prompt lists it.
    pub name: String,
}

struct LoadSkill {
    skills: Arc<SkillSet>,
}

/// The `load_skill` tool over `skills`, bound as `skills:load_skill`.
pub fn load_skill_tool(skills: Arc<SkillSet>) -> BoundTool {
    let spec = ToolSpec {
        name: LOAD_SKILL_TOOL.to_string(),
        description: "Load a skill listed in the system prompt: returns its instructions \
            (SKILL.md) and the paths of its other files, which read_file can read."
            .to_string(),
        input_schema: input_schema::<LoadSkillInput>(),
        safety: SafetyLevel::Safe,
        personal_data: PersonalDataClass::None,
        resource_keys: ResourceKeyRule::None,
        path_args: Vec::new(),
        effectful: false,
        command_arg: None,
        deadline_arg: None,
    };
    BoundTool {
        binding: format!("skills:{LOAD_SKILL_TOOL}"),
        spec,
        handler: Arc::new(LoadSkill { skills }),
    }
}

#[async_trait]
impl ToolHandler for LoadSkill {
    async fn call(&self, input: &Value, _ctx: &ToolContext) -> ToolOutput {
        let input: LoadSkillInput = match parse_input(input) {
            Ok(i) => i,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let Some(skill) = self.skills.get(&input.name) else {
            let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
            return ToolOutput::error(format!(
                "no skill named {:?}; the skills are: {}",
                input.name,
                names.join(", ")
            ));
        };
        let mut out = format!(
            "<skill name=\"{}\" folder=\"{}\">\n{}\n</skill>\n",
            skill.name,
            skill.dir.display(),
            skill.body.trim_end()
        );
        if !skill.allowed_tools.is_empty() {
            out.push_str(&format!(
                "The skill expects these tools: {}\n",
                skill.allowed_tools.join(", ")
            ));
        }
        let others: Vec<String> = skill
            .files
            .keys()
            .filter(|p| p.as_os_str() != SKILL_FILE)
            .map(|p| skill.dir.join(p).display().to_string())
            .collect();
        if others.is_empty() {
            out.push_str("The skill has no other files.\n");
        } else {
            out.push_str("Files of the skill (read them with read_file at these paths):\n");
            for p in others {
                out.push_str(&format!("{p}\n"));
            }
        }
        ToolOutput::ok(out)
    }
}
