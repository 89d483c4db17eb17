//! Tools that join a running session's plan between turns: an MCP server that connected
//! (in the background) after the session started. The plan stays immutable per generation;
//! this builds the next one.

use std::sync::Arc;

use super::{BoundTool, BoundToolPlan, ExecutorError, ToolExecutor};

/// Where tools that join after a session started come from (the MCP manager's connected
/// servers): every call answers the tools available now, those seen before included.
pub type ToolSource = Arc<dyn Fn() -> Vec<BoundTool> + Send + Sync>;

impl ToolExecutor {
    /// A new plan generation with those of `tools` the plan lacks and the policy allows (an
    /// MCP server that connected after the session started). Tools already in the plan stay
    /// as they are: their handlers reach a restarted server through a shared peer slot.
    /// Returns the names added; none added leaves the plan (and its hash) unchanged.
    pub fn add_tools(&mut self, tools: Vec<BoundTool>) -> Result<Vec<String>, ExecutorError> {
        let mut added: Vec<BoundTool> = Vec::new();
        for t in tools {
            let name = &t.spec.name;
            let fresh =
                self.plan.get(name).is_none() && !added.iter().any(|a| &a.spec.name == name);
            if fresh && !self.policy.deny_list.contains(name) && self.policy.allows_tool(name) {
                added.push(t);
            }
        }
        let mut validators = Vec::with_capacity(added.len());
        for t in &added {
            let v = jsonschema::validator_for(&t.spec.input_schema).map_err(|e| {
                ExecutorError::BadSchema {
                    tool: t.spec.name.clone(),
                    message: e.to_string(),
                }
            })?;
            validators.push((t.spec.name.clone(), v));
        }
        let names: Vec<String> = added.iter().map(|t| t.spec.name.clone()).collect();
        if added.is_empty() {
            return Ok(names);
        }
        self.validators.extend(validators);
        let mut all = self.plan.tools().to_vec();
        all.extend(added);
        self.plan = BoundToolPlan::new(self.plan.generation() + 1, all);
        Ok(names)
    }
}
