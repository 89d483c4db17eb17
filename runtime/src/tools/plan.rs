//! The BoundToolPlan: the immutable set of tools a session may use, and the tool handler trait.
//!
//! A plan is built once per session (and again only as a new generation), hashed over the
//! canonical JSON of its specs and handler bindings, and projected to each provider's tool
//! schema shape. A `StepSnapshot` (in ids.rs) pins which plan a model call saw.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cognition::CognitiveState;
use crate::conversation::Image;
use crate::ids::{CorrelationId, PlanHash, SessionId, canonical_sha256};
use crate::policy::{Classification, PersonalDataClass, SafetyLevel};
use crate::tools::output::OutputSink;
use crate::tools::workspace::Workspace;

/// How a call's resource keys are derived; calls sharing a key never run at the same time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ResourceKeyRule {
    /// No lock.
    None,
    /// One key per resolved path argument (`file:<absolute path>`).
    PathArgs,
    /// The whole workspace (shell commands can touch anything).
    Workspace,
    /// A named resource shared by every call of the tool.
    Fixed(String),
    /// Several named resources, all held by every call of the tool (an MCP server's declared
    /// policy); calls of other tools sharing any one of them wait.
    Keys(Vec<String>),
}

/// Everything about a tool except its code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// What the model calls the tool; unique within a plan.
    pub name: String,
    /// What the model is told the tool does.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// How much harm a call can do; the policy and the approval gate decide on it.
    pub safety: SafetyLevel,
    /// What personal data a call may touch.
    pub personal_data: PersonalDataClass,
    /// Which calls of this and other tools may not run at the same time as one of its calls.
    pub resource_keys: ResourceKeyRule,
    /// Input fields holding workspace paths; checked at the scope step.
    pub path_args: Vec<String>,
    /// Whether a call changes the world outside the conversation (gets an effect receipt).
    pub effectful: bool,
    /// The input field holding a shell command line, if the tool has one: the forbidden
    /// commands, the receipt classifier and the approval preview read this field and no other.
    /// Absent from the plan hash's JSON when unset, so plans without one hash as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_arg: Option<String>,
    /// The input field asking for a dispatch deadline in whole seconds, if the tool has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_arg: Option<String>,
}

impl ToolSpec {
    pub(crate) fn classification(&self) -> Classification {
        Classification {
            safety: self.safety,
            personal_data: self.personal_data,
        }
    }

    /// The command line `input` carries in the declared command argument.
    pub fn command<'a>(&self, input: &'a Value) -> Option<&'a str> {
        input.get(self.command_arg.as_deref()?)?.as_str()
    }

    /// The deadline `input` asks for in the declared deadline argument (whole seconds).
    pub fn requested_deadline(&self, input: &Value) -> Option<Duration> {
        input
            .get(self.deadline_arg.as_deref()?)?
            .as_u64()
            .map(Duration::from_secs)
    }
}

/// What a handler returns. Denials never reach a handler; they are built by the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The text the model reads.
    pub content: String,
    /// Whether the call failed; the model is shown the content as an error.
    pub is_error: bool,
    /// Screenshots for the model (the computer tool); most tools return none.
    pub images: Vec<Image>,
}

impl ToolOutput {
    /// A successful result with text `content` and no images.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// An error the model should read and react to (not a crash of the turn).
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// What a handler may see of the session; a fresh one per call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session the call belongs to.
    pub session_id: SessionId,
    /// The model's id for this call (`tool_use_id`).
    pub call_id: String,
    /// The correlation id of the model step that proposed the call.
    pub correlation_id: CorrelationId,
    /// The model that proposed the call.
    pub model_id: String,
    /// Where the call acts.
    pub workspace: Arc<dyn Workspace>,
    /// Inputs of `path_args`, already resolved inside the workspace by the scope step.
    pub resolved_paths: Vec<(String, PathBuf)>,
    /// The dispatch deadline; long-running handlers should stop their own work by then.
    pub deadline: Duration,
    /// Fires when the step is cancelled or the handler overran its deadline; stop on it.
    pub cancel: CancellationToken,
    /// Plan, hypotheses and confidence, for the cognitive tools.
    pub cognition: Arc<Mutex<CognitiveState>>,
    /// Where output goes while the call runs, for a person watching; never what the model
    /// reads (that is the returned `ToolOutput`).
    pub output: OutputSink,
}

impl ToolContext {
    /// The resolved path of input field `arg`, if the scope step resolved one.
    pub fn path(&self, arg: &str) -> Option<&PathBuf> {
        self.resolved_paths
            .iter()
            .find(|(name, _)| name == arg)
            .map(|(_, p)| p)
    }
}

/// The code of a tool, called once per call that passed the pipeline.
#[async_trait]
pub trait ToolHandler: Send + Sync {
    /// Run the call. `input` has passed schema validation.
    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutput;
}

/// A spec bound to the code that runs it.
#[derive(Clone)]
pub struct BoundTool {
    /// What the model and the pipeline are told of the tool.
    pub spec: ToolSpec,
    /// A stable name of the handler (`builtin:bash`, `mcp:server/tool`), part of the plan hash.
    pub binding: String,
    /// The code that runs a call.
    pub handler: Arc<dyn ToolHandler>,
}

impl std::fmt::Debug for BoundTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundTool")
            .field("name", &self.spec.name)
            .field("binding", &self.binding)
            .finish()
    }
}

/// The wire shapes providers expect tool declarations in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSchemaShape {
    /// `{name, description, input_schema}`
    AnthropicMessages,
    /// `{type: "function", name, description, parameters}`
    OpenAiResponses,
    /// `{type: "function", function: {name, description, parameters}}`
    ChatCompletions,
}

/// An immutable snapshot of the tools one session may call. Changing anything means building a
/// new plan with a higher generation.
#[derive(Debug, Clone)]
pub struct BoundToolPlan {
    generation: u64,
    tools: Arc<[BoundTool]>,
    hash: PlanHash,
}

impl BoundToolPlan {
    /// Generation `generation` of `tools`, sorted by name; of tools with the same name only
    /// the first is kept.
    pub fn new(generation: u64, mut tools: Vec<BoundTool>) -> Self {
        tools.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        tools.dedup_by(|a, b| a.spec.name == b.spec.name);
        let canonical = json!({
            "generation": generation,
            "tools": tools
                .iter()
                .map(|t| json!({"spec": t.spec, "binding": t.binding}))
                .collect::<Vec<_>>(),
        });
        BoundToolPlan {
            generation,
            hash: PlanHash::new(canonical_sha256(&canonical)),
            tools: tools.into(),
        }
    }

    /// A new generation without the named tools (a session's deny list).
    pub fn without(&self, names: &BTreeSet<String>) -> Self {
        let kept = self
            .tools
            .iter()
            .filter(|t| !names.contains(&t.spec.name))
            .cloned()
            .collect();
        BoundToolPlan::new(self.generation + 1, kept)
    }

    /// Which plan of the session this is; each change builds the next one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// SHA-256 of the canonical JSON of the generation, specs and bindings.
    pub fn hash(&self) -> &PlanHash {
        &self.hash
    }

    /// The tool the model calls `name`, if the plan has it.
    pub fn get(&self, name: &str) -> Option<&BoundTool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// Every tool, in name order.
    pub fn tools(&self) -> &[BoundTool] {
        &self.tools
    }

    /// The declarations a provider sees, in the plan's (name) order.
    pub fn project(&self, shape: ToolSchemaShape) -> Vec<Value> {
        self.tools
            .iter()
            .map(|t| {
                let s = &t.spec;
                match shape {
                    ToolSchemaShape::AnthropicMessages => json!({
                        "name": s.name, "description": s.description, "input_schema": s.input_schema,
                    }),
                    ToolSchemaShape::OpenAiResponses => json!({
                        "type": "function", "name": s.name, "description": s.description,
                        "parameters": s.input_schema,
                    }),
                    ToolSchemaShape::ChatCompletions => json!({
                        "type": "function",
                        "function": {"name": s.name, "description": s.description, "parameters": s.input_schema},
                    }),
                }
            })
            .collect()
    }
}
