//! Slash commands answered by the session side (the daemon, or the REPL's in-process server),
//! so the REPL and the thin client print the same text. `/clear`, `/resume` and `/quit` change
//! the connection and live in `connection.rs`.

use super::Shared;
use crate::agent::AgenticLoop;
use crate::agent::rewind::describe_points;
use crate::model::catalog::cost_text;
use crate::model::effort::Effort;

/// The text of `/help`: one line per command, then `!COMMAND`.
pub const HELP: &str = "\
/help               this list
/status             session, model, turns, lanes, system prompt hash
/cost               tokens and cost of the session
/plan               the current plan
/model [ROUTE]      show the model and the routes, or switch to ROUTE from the next turn on
/effort [LEVEL]     show the effort, or set none..max (or `default`) from the next turn on
/compact            summarise the older part of the conversation now
/mode [MODE]        permission mode: default, accept-edits (file edits without asking) or
                    plan (read-only); no MODE: the next one (Shift-Tab in the REPL)
/rewind [N]         list the turns, or put the files they changed and the conversation back
                    to before turn N (--force: also files changed since by someone else)
/clear              start a new session
/resume [ID]        continue a checkpointed session (no id: the recent ones)
/mcp                MCP servers
/hooks              configured hooks
/skills             the skills sessions here see (load_skill loads one)
/quit               leave (Ctrl-D too); Ctrl-C cancels a running turn
!COMMAND            run COMMAND in the workspace through the tool pipeline; the model reads
                    its output with your next prompt";

/// The text answer of a command that does not change the connection.
pub fn run(name: &str, lp: &AgenticLoop, shared: &Shared) -> String {
    match name {
        "help" => HELP.to_string(),
        "status" => format!(
            "session {}\nmodel {}\nmode {}\nturns {}, messages {}\nlanes {}/{} busy\n\
             checkpoint {}\nsystem prompt {}",
            lp.session_id(),
            lp.model_id(),
            shared.mode,
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
                "input {} (cached {}), output {}, reasoning {} tokens; {}",
                u.input_tokens,
                u.cached_input_tokens,
                u.output_tokens,
                u.reasoning_tokens,
                cost_text(lp.model_id(), u.cost_usd)
            )
        }
        "plan" => match lp.cognition().plan {
            Some(plan) => serde_json::to_string_pretty(&plan).unwrap_or_default(),
            None => "no plan yet (the model makes one with update_plan)".into(),
        },
        "model" => format!("{}\n{}", describe_model(lp), catalog_routes()),
        "effort" => describe_model(lp),
        "mcp" => shared.factory.describe_mcp(),
        "hooks" => shared.factory.describe_hooks(),
        "skills" => shared.factory.describe_skills(),
        other => format!("unknown command /{other}; /help lists them"),
    }
}

/// The routes `/model ROUTE` takes: the catalog's models per provider, and the embedded ones.
fn catalog_routes() -> String {
    use crate::model::catalog::{Catalog, ProviderKind};
    let Ok(catalog) = Catalog::builtin() else {
        return "the model catalog cannot be read".into();
    };
    let mut lines = vec!["routes (/model ROUTE):".to_string()];
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::Openai,
        ProviderKind::Glm,
        ProviderKind::Openrouter,
    ] {
        let ids = catalog.ids_of(kind);
        if !ids.is_empty() {
            let routes: Vec<String> = ids
                .iter()
                .map(|id| format!("{}:{id}", kind.as_str()))
                .collect();
            lines.push(format!("  {}", routes.join("  ")));
        }
    }
    lines.push("  compat:BASE_URL:MODEL (an OpenAI-compatible server)".into());
    lines.push("  nop  scripted:FILE  oracle:SOLVE_SH  replay:DB[#SESSION]".into());
    lines.join("\n")
}

fn describe_model(lp: &AgenticLoop) -> String {
    match lp.model_route() {
        Some((route, effort)) => format!(
            "model {} (route {route}), effort {}",
            lp.model_id(),
            effort.map_or("default".to_string(), |e| e.to_string())
        ),
        None => format!("model {}", lp.model_id()),
    }
}

/// `/model ROUTE` and `/effort LEVEL`: a new model for the rest of the session. Runs between
/// turns (the connection queues commands while a turn runs).
pub fn switch(name: &str, args: &str, lp: &mut AgenticLoop, shared: &Shared) -> String {
    let arg = args.trim();
    let Some((route, effort)) = lp.model_route().map(|(r, e)| (r.to_string(), e)) else {
        return "this session is not checkpointed, so its route is unknown: start a new one \
                with `geode --model ROUTE --effort LEVEL`"
            .into();
    };
    let (route, effort) = if name == "model" {
        (arg.to_string(), effort)
    } else if arg == "default" {
        (route, None)
    } else {
        match arg.parse::<Effort>() {
            Ok(e) => (route, Some(e)),
            Err(_) => {
                return format!(
                    "effort {arg:?}: none, minimal, low, medium, high, xhigh, max or default"
                );
            }
        }
    };
    let switch = match shared.factory.switch_model(&route, effort) {
        Ok(s) => s,
        Err(e) => return format!("error: {e} (still on {})", lp.model_id()),
    };
    match lp.switch_model(switch) {
        Ok(()) => format!("switched: {}", describe_model(lp)),
        Err(e) => format!(
            "switched to {}, but the checkpoint could not record it: {e}",
            lp.model_id()
        ),
    }
}

/// `/mode [MODE]`: shows the permission mode after switching to MODE, or to the next one.
pub fn permission_mode(lp: &mut AgenticLoop, args: &str) -> String {
    use crate::tools::approval::PermissionMode;
    let wanted = match args.trim() {
        "" | "next" => lp.permission_mode().next(),
        other => match PermissionMode::parse(other) {
            Some(m) => m,
            None => {
                return format!(
                    "no permission mode {other:?}: {}",
                    <PermissionMode as strum::IntoEnumIterator>::iter()
                        .map(PermissionMode::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        },
    };
    lp.set_permission_mode(wanted);
    let what = match wanted {
        PermissionMode::Default => "calls ask as the session's policy says",
        PermissionMode::AcceptEdits => "file edits run without asking; commands still ask",
        PermissionMode::Plan => "read-only: nothing is changed until you leave plan mode",
    };
    format!("mode {}: {what}", wanted.as_str())
}

/// `/rewind`: the turns to go back to, or `/rewind N [--force]` going back to before turn N.
pub fn rewind(lp: &mut AgenticLoop, args: &str) -> String {
    let mut force = false;
    let mut turn = None;
    for word in args.split_whitespace() {
        match (word, word.parse::<u32>()) {
            ("--force", _) => force = true,
            (_, Ok(n)) if turn.is_none() => turn = Some(n),
            _ => return format!("/rewind takes a turn number and --force; not {word:?}"),
        }
    }
    let answer = match turn {
        None => lp.rewind_points().map(|p| describe_points(&p)),
        Some(turn) => lp.rewind_to(turn, force).map(|r| r.to_string()),
    };
    answer.unwrap_or_else(|e| format!("error: {e}"))
}

/// `/compact`: the older messages become one extractive summary now (the loop also does this
/// by itself when the context passes the scaffold's threshold).
pub(crate) async fn compact(lp: &mut AgenticLoop) -> String {
    match lp.compact_between_turns().await {
        Some((before, after)) => {
            format!("compacted: {before} messages -> {after} (a summary and the recent ones)")
        }
        None => format!(
            "nothing compacted: {} messages, none old enough to summarise (or a PreCompact \
             hook deferred; see the timeline)",
            lp.messages().len()
        ),
    }
}
