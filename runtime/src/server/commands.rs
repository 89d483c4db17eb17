//! Slash commands answered by the session side (the daemon, or the REPL's in-process server),
//! so the REPL and the thin client print the same text. `/clear`, `/resume` and `/quit` change
//! the connection and live in `connection.rs`.

use super::Shared;
use crate::agent::AgenticLoop;

pub const HELP: &str = "\
/help               this list
/status             session, model, turns, lanes, system prompt hash
/cost               tokens and cost of the session
/plan               the current plan
/model              the model of this session
/effort             the reasoning effort
/compact            when the context is compacted
/clear              start a new session
/resume SESSION_ID  continue a checkpointed session
/mcp                MCP servers
/hooks              configured hooks
/quit               leave (Ctrl-D too); Ctrl-C cancels a running turn";

/// The text answer of a command that does not change the connection.
pub fn run(name: &str, args: &str, lp: &AgenticLoop, shared: &Shared) -> String {
    match name {
        "help" => HELP.to_string(),
        "status" => format!(
            "session {}\nmodel {}\nmode {}\nturns {}, messages {}\nlanes {}/{} busy\n\
             checkpoint {}\nsystem prompt {}",
            lp.session_id(),
            lp.model_id(),
            shared.mode_name(),
            lp.turns(),
            lp.messages().len(),
            shared.lanes.running(),
            shared.lanes.global_capacity(),
            lp.checkpoint_dir()
                .map_or("none".to_string(), |p| p.display().to_string()),
            lp.system_prompt_hash().unwrap_or("(no call yet)"),
        ),
        "cost" => {
            let u = lp.usage();
            format!(
                "input {} (cached {}), output {}, reasoning {} tokens; ${:.4}",
                u.input_tokens,
                u.cached_input_tokens,
                u.output_tokens,
                u.reasoning_tokens,
                u.cost_usd
            )
        }
        "plan" => match lp.cognition().plan {
            Some(plan) => serde_json::to_string_pretty(&plan).unwrap_or_default(),
            None => "no plan yet (the model makes one with update_plan)".into(),
        },
        "model" if args.trim().is_empty() => format!("model {}", lp.model_id()),
        "model" | "effort" => format!(
            "/{name} {args}: the model and effort are fixed for a session; start one with \
             `geode --model ROUTE --effort LEVEL` or set them in .geode/config.toml"
        ),
        "compact" => "the context is compacted automatically when it passes the scaffold's \
                      threshold; the summary keeps the recent messages"
            .into(),
        "mcp" => shared.factory.describe_mcp(),
        "hooks" => shared.factory.describe_hooks(),
        other => format!("unknown command /{other}; /help lists them"),
    }
}
