//! The agent phase of a third-party agent (Claude Code, Codex CLI, mini-swe-agent, a
//! `command:` program): the trial's model gateway on the host, listening on the sandbox's own
//! loopback (the one address of the host's an agent without network reaches), the agent
//! started headless inside the sandbox with the gateway as its provider and a per-trial token,
//! and the trial's records, usage and ATIF trajectory made from the gateway's records of the
//! calls: the same for every agent, no parser of any agent's own logs.

use geode_graders::AgentEnd;
use geode_runtime::model::catalog::Route;
use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use super::agent::AgentSetupError;
use super::plan::{Stage, TrialPlan};
use super::record::Record;
use crate::agents::TrialAgent;
use crate::agents::spec::{AGENT_LOGS, LaunchCommand, LaunchContext};
use crate::env::dockerfile::shell_quote;
use crate::env::{EnvError, Sandbox};
use crate::gateway::{self, Budgets, GatewayConfig, Listen};
use crate::rollout::task_command::scaled;
use crate::store::TrialUsage;

/// Output kept of the agent's own standard output and error (its log, beside the gateway's).
const OUTPUT_CAP: usize = 4 << 20;

/// The agent phase for a third-party agent.
pub(super) async fn run_external_agent(
    plan: &TrialPlan,
    stage: &Stage<'_>,
    sandbox: &dyn Sandbox,
    cancel: &CancellationToken,
    rec: &mut Record,
) -> Result<AgentEnd, AgentSetupError> {
    let model = super::agent::trial_model(plan, stage, sandbox).await?;
    let model_name = wire_model_name(plan);
    let listener = sandbox.listen_inside(0).await?;
    let port = listener
        .local_addr()
        .map_err(|e| EnvError::Lost(format!("the gateway's listener inside: {e}")))?
        .port();
    let guards = &plan.scaffold.guards;
    let budgets = Budgets {
        max_calls: Some(u64::from(guards.max_rounds)),
        max_tokens: guards.token_budget,
        max_cost_usd: guards.cost_budget_usd,
    };
    let gateway = gateway::start(GatewayConfig {
        model,
        model_name: model_name.clone().unwrap_or_else(|| plan.route.to_string()),
        budgets,
        record_file: plan.trial_dir.join(gateway::RECORD_FILE),
        listen: Listen {
            inside: Some(listener),
            ..Listen::default()
        },
        secrets: host_secrets(),
    })
    .await
    .map_err(AgentSetupError::Gateway)?;
    let base_url = format!("http://127.0.0.1:{port}");
    let ctx = LaunchContext {
        instruction: stage.instruction,
        model: model_name.as_deref(),
        base_url: &base_url,
        token: gateway.token(),
    };
    let Some(launch) = plan.agent.launch(&ctx) else {
        return Err(AgentSetupError::Env(EnvError::Unsupported(
            "GEODE's own runtime is not a program to start in the sandbox".into(),
        )));
    };
    if let TrialAgent::Builtin { agent, installed } = plan.agent.as_ref() {
        rec.notes.push(format!(
            "agent {}, layer {}, speaking {} to the trial's gateway",
            plan.agent.label(),
            installed.digest,
            agent.wire
        ));
    }
    if let TrialAgent::Builtin { installed, .. } = plan.agent.as_ref()
        && let Some(python) = &installed.python
    {
        require_python(sandbox, python, plan.agent.name()).await?;
    }
    let command = command_line(&launch);
    let budget = scaled(stage.agent_timeout, plan.timeout_multiplier);
    let run = sandbox
        .exec(
            ExecRequest {
                command,
                cwd: None,
                timeout: budget,
                output_cap: OUTPUT_CAP,
                env: launch.env.clone(),
            },
            cancel.child_token(),
        )
        .await;
    let records = match gateway.finish().await {
        Ok(records) => records,
        Err(e) => {
            rec.integrity.push(format!(
                "records_missing: the model gateway ended badly: {e}"
            ));
            gateway::records::read(&plan.trial_dir.join(gateway::RECORD_FILE)).unwrap_or_default()
        }
    };
    let agent_dir = plan.trial_dir.join("agent");
    let out = run?;
    for (name, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let path = agent_dir.join(format!("{}.{name}.txt", plan.agent.name()));
        if let Err(e) = geode_graders::safe_fs::write(&path, text.as_bytes()) {
            rec.notes
                .push(format!("could not write {}: {e}", path.display()));
        }
    }
    rec.usage = usage(&records);
    rec.agent_acted = records.iter().any(|r| {
        r.reply.as_ref().is_some_and(|turn| {
            turn.message.content.iter().any(|block| {
                matches!(
                    block,
                    geode_runtime::conversation::ContentBlock::ToolUse { .. }
                )
            })
        })
    });
    let refused = records
        .iter()
        .filter(|r| r.status != gateway::CallStatus::Ok)
        .count();
    if refused > 0 {
        rec.notes.push(format!(
            "the gateway refused or failed {refused} of the agent's {} model calls (see {})",
            records.len(),
            gateway::RECORD_FILE
        ));
    }
    let doc = gateway::trajectory::trajectory(&plan.agent.label(), &plan.trial_name, &records);
    let path = agent_dir.join("trajectory.json");
    if let Ok(text) = serde_json::to_string_pretty(&doc)
        && let Err(e) = geode_graders::safe_fs::write(&path, text.as_bytes())
    {
        rec.notes
            .push(format!("could not write {}: {e}", path.display()));
    }
    Ok(if out.timed_out {
        AgentEnd::TimedOut
    } else if out.cancelled || cancel.is_cancelled() {
        AgentEnd::Cancelled
    } else if out.exit_code == Some(0) {
        AgentEnd::Finished
    } else {
        rec.notes.push(format!(
            "{} exited with {}",
            plan.agent.label(),
            out.exit_code
                .map_or_else(|| "a signal".to_string(), |c| format!("status {c}"))
        ));
        AgentEnd::Errored
    })
}

/// The model an agent should ask for: a provider route's model; none for an embedded model or
/// a cassette, whose names no agent knows (it then asks for its default, and the gateway
/// answers with the route whatever the request names).
fn wire_model_name(plan: &TrialPlan) -> Option<String> {
    match &plan.route {
        Route::Provider(p) => Some(p.model.clone()),
        Route::Judge(_) | Route::Embedded(_) | Route::Cassette(_) => None,
    }
}

/// The command line `bash -c` runs: the agent's folders under `/logs/agent` made, then the
/// program with its arguments quoted, the instruction also on its standard input.
fn command_line(launch: &LaunchCommand) -> String {
    let mut line = String::new();
    for dir in &launch.dirs {
        line.push_str(&format!(
            "mkdir -p {} && ",
            shell_quote(&format!("{AGENT_LOGS}/{dir}"))
        ));
    }
    let argv: Vec<String> = launch.argv.iter().map(|a| shell_quote(a)).collect();
    // A `command:` agent reads the instruction on its standard input, from its environment
    // variable (no here-document, whose end marker an instruction could contain); the
    // built-in agents get it as an argument and an empty input (a headless agent waiting on a
    // terminal would hang).
    if launch.env.iter().any(|(k, _)| k == "GEODE_INSTRUCTION") {
        line.push_str("printf '%s\\n' \"$GEODE_INSTRUCTION\" | ");
        line.push_str(&argv.join(" "));
    } else {
        line.push_str("exec ");
        line.push_str(&argv.join(" "));
        line.push_str(" </dev/null");
    }
    line
}

/// A Python agent's layer runs on the image's interpreter: without it the agent cannot start,
/// which is the environment's lack, not the agent's failure.
async fn require_python(
    sandbox: &dyn Sandbox,
    python: &str,
    agent: &str,
) -> Result<(), AgentSetupError> {
    let out = sandbox
        .exec(
            ExecRequest {
                command: format!("test -x {}", shell_quote(python)),
                cwd: None,
                timeout: std::time::Duration::from_secs(10),
                output_cap: 1024,
                env: Vec::new(),
            },
            CancellationToken::new(),
        )
        .await?;
    if out.exit_code == Some(0) {
        return Ok(());
    }
    Err(AgentSetupError::Env(EnvError::Unsupported(format!(
        "{agent} runs on the image's {python}, which this task's image does not have"
    ))))
}

/// Values of this process's provider keys and tokens: the gateway cuts them from anything it
/// sends or records, so no error message hands the real key to the agent.
fn host_secrets() -> Vec<String> {
    std::env::vars()
        .filter(|(k, v)| {
            let k = k.to_ascii_uppercase();
            v.len() >= 8
                && (k.ends_with("_API_KEY") || k.ends_with("_AUTH_TOKEN") || k.ends_with("_TOKEN"))
        })
        .map(|(_, v)| v)
        .collect()
}

/// The trial's usage, summed from the gateway's records.
fn usage(records: &[gateway::CallRecord]) -> TrialUsage {
    let mut usage = TrialUsage::default();
    for r in records
        .iter()
        .filter(|r| r.status == gateway::CallStatus::Ok)
    {
        usage.input_tokens += r.usage.input_tokens;
        usage.cached_tokens += r.usage.cached_input_tokens;
        usage.output_tokens += r.usage.output_tokens + r.usage.reasoning_tokens;
        usage.cost_usd += r.usage.cost_usd;
        usage.model_calls += 1;
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instruction_never_becomes_shell_text() {
        let hostile = "line one\nGEODE_INSTRUCTION_END\ntouch /pwned\n$(id) `id`";
        let launch = LaunchCommand {
            argv: vec!["/bin/sh".into(), "-c".into(), "cat".into()],
            env: vec![("GEODE_INSTRUCTION".into(), hostile.into())],
            dirs: vec!["x".into()],
        };
        let line = command_line(&launch);
        assert!(!line.contains("pwned") && !line.contains("$(id)"), "{line}");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(line.replace("mkdir -p '/logs/agent/x' && ", ""))
            .env("GEODE_INSTRUCTION", hostile)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{hostile}\n"));
    }
}
