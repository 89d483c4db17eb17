//! The built-in third-party agents: how each is installed (a package from npm or PyPI at a
//! pinned version), which provider wire format it speaks, and how it is started headless on an
//! instruction with the trial's gateway as its only provider.

use crate::gateway::records::WireFormat;

/// Where an agent's files live inside the sandbox: its cached layer puts them under here.
pub const AGENT_ROOT: &str = "/opt/geode-agent";

/// Where an agent's own logs go inside the sandbox (the trial's `agent/` folder).
pub const AGENT_LOGS: &str = "/logs/agent";

/// How an agent's package becomes its layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// `npm install` of `package` for linux/x64/glibc, scripts off: the package ships a native
    /// program in a platform package, `binary` (relative to the install's `node_modules/`), so
    /// the image needs no Node.js.
    Npm {
        /// The npm package.
        package: &'static str,
        /// The program inside `node_modules/`.
        binary: &'static str,
    },
    /// A virtual environment with `package` from PyPI, made with this machine's `python3`: the
    /// image must have the same Python (`/usr/bin/python3.X`), which [`super::install`] records
    /// and the trial checks before it starts the agent.
    PythonVenv {
        /// The PyPI distribution.
        package: &'static str,
        /// The module `python -m` runs.
        module: &'static str,
    },
}

/// One built-in agent.
#[derive(Debug, PartialEq, Eq)]
pub struct BuiltinAgent {
    /// Its name on the command line and in results (`claude-code`).
    pub name: &'static str,
    /// The version installed when the person names none: pinned, so a run is repeatable.
    pub version: &'static str,
    /// Where it comes from.
    pub install: Install,
    /// What it speaks.
    pub wire: WireFormat,
}

/// The built-in third-party agents.
pub static BUILTIN: [BuiltinAgent; 3] = [
    BuiltinAgent {
        name: "claude-code",
        version: "2.1.332",
        install: Install::Npm {
            package: "@anthropic-ai/claude-code",
            binary: "@anthropic-ai/claude-code-linux-x64/claude",
        },
        wire: WireFormat::AnthropicMessages,
    },
    BuiltinAgent {
        name: "codex",
        version: "0.171.0",
        install: Install::Npm {
            package: "@openai/codex",
            binary: "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        },
        wire: WireFormat::OpenaiResponses,
    },
    BuiltinAgent {
        name: "mini-swe-agent",
        version: "2.4.6",
        install: Install::PythonVenv {
            package: "mini-swe-agent",
            module: "minisweagent.run.mini",
        },
        wire: WireFormat::ChatCompletions,
    },
];

/// What a started agent is given: the instruction, the model name it should ask for, and the
/// gateway as its provider.
#[derive(Debug, Clone)]
pub struct LaunchContext<'a> {
    /// The stage's instruction.
    pub instruction: &'a str,
    /// The model name the agent should ask for: the provider's model of a provider route;
    /// `None` (an embedded model) leaves the agent its default. The gateway answers with the
    /// trial's route whatever the request names.
    pub model: Option<&'a str>,
    /// The gateway's base URL as the agent reaches it (`http://127.0.0.1:PORT`).
    pub base_url: &'a str,
    /// The trial's own token for the gateway.
    pub token: &'a str,
}

/// A program to run inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchCommand {
    /// The program and its arguments (no shell in between).
    pub argv: Vec<String>,
    /// Environment on top of the image's.
    pub env: Vec<(String, String)>,
    /// Folders under [`AGENT_LOGS`] the agent expects to exist.
    pub dirs: Vec<String>,
}

impl BuiltinAgent {
    /// The program the agent's layer provides, as a path inside the sandbox.
    pub fn program(&self) -> String {
        match self.install {
            Install::Npm { binary, .. } => {
                format!("{AGENT_ROOT}/{}/node_modules/{binary}", self.name)
            }
            Install::PythonVenv { .. } => format!("{AGENT_ROOT}/{}/bin/python3", self.name),
        }
    }

    /// How the agent starts headless on `ctx`'s instruction, every call to the gateway.
    pub fn launch(&self, ctx: &LaunchContext<'_>) -> LaunchCommand {
        let s = |v: &str| v.to_string();
        let mut env = gateway_env(ctx);
        let (argv, dirs) = match (self.name, self.install) {
            ("claude-code", _) => {
                env.extend([
                    (s("CLAUDE_CONFIG_DIR"), format!("{AGENT_LOGS}/claude")),
                    // Claude Code refuses --dangerously-skip-permissions as root unless told
                    // it is in a sandbox, which it is.
                    (s("IS_SANDBOX"), s("1")),
                    (s("DISABLE_AUTOUPDATER"), s("1")),
                    (s("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), s("1")),
                ]);
                let mut argv = vec![
                    self.program(),
                    s("--print"),
                    s("--dangerously-skip-permissions"),
                    s("--output-format"),
                    s("stream-json"),
                    s("--verbose"),
                ];
                if let Some(model) = ctx.model {
                    argv.extend([s("--model"), s(model)]);
                }
                argv.push(s(ctx.instruction));
                (argv, vec![s("claude")])
            }
            ("codex", _) => {
                env.push((s("CODEX_HOME"), format!("{AGENT_LOGS}/codex")));
                let provider =
                    |key: &str, value: &str| format!("model_providers.geode.{key}={value:?}");
                let mut argv = vec![
                    self.program(),
                    s("exec"),
                    s("--skip-git-repo-check"),
                    // The trial's sandbox is the sandbox: Codex's own (bubblewrap) would nest.
                    s("--dangerously-bypass-approvals-and-sandbox"),
                    s("--json"),
                    s("-c"),
                    s("model_provider=\"geode\""),
                    s("-c"),
                    provider("name", "geode gateway"),
                    s("-c"),
                    provider("base_url", &format!("{}/v1", ctx.base_url)),
                    s("-c"),
                    provider("env_key", "GEODE_GATEWAY_TOKEN"),
                    s("-c"),
                    provider("wire_api", "responses"),
                ];
                if let Some(model) = ctx.model {
                    argv.extend([s("-m"), s(model)]);
                }
                argv.push(s(ctx.instruction));
                (argv, vec![s("codex")])
            }
            (_, Install::PythonVenv { module, .. }) => {
                env.extend([
                    (s("MSWEA_CONFIGURED"), s("true")),
                    (
                        s("MSWEA_GLOBAL_CONFIG_DIR"),
                        format!("{AGENT_LOGS}/mini-swe-agent"),
                    ),
                    // The gateway prices the calls; litellm does not know the model's price.
                    (s("MSWEA_COST_TRACKING"), s("ignore_errors")),
                    // litellm fetches its price list from GitHub at import, retrying for
                    // seconds where there is no network; the copy it ships is enough.
                    (s("LITELLM_LOCAL_MODEL_COST_MAP"), s("True")),
                ]);
                let argv = vec![
                    self.program(),
                    s("-m"),
                    s(module),
                    s("--yolo"),
                    s("--exit-immediately"),
                    s("--cost-limit"),
                    s("0"),
                    s("--model"),
                    // litellm routes by the prefix; the name after it is the gateway's concern.
                    format!("openai/{}", ctx.model.unwrap_or("geode-gateway")),
                    s("--output"),
                    format!("{AGENT_LOGS}/mini-swe-agent/trajectory.json"),
                    s("--task"),
                    s(ctx.instruction),
                ];
                (argv, vec![s("mini-swe-agent")])
            }
            (_, Install::Npm { .. }) => (vec![self.program(), s(ctx.instruction)], Vec::new()),
        };
        LaunchCommand { argv, env, dirs }
    }
}

/// A `command:` agent: `sh -c PROGRAM`, the instruction in `$GEODE_INSTRUCTION` (and on
/// standard input, which the runner gives it).
pub fn command_launch(program: &str, ctx: &LaunchContext<'_>) -> LaunchCommand {
    let mut env = gateway_env(ctx);
    env.push(("GEODE_INSTRUCTION".into(), ctx.instruction.into()));
    LaunchCommand {
        argv: vec!["/bin/sh".into(), "-c".into(), program.into()],
        env,
        dirs: Vec::new(),
    }
}

/// Every provider variable an agent or its SDK reads, all pointing at the gateway with the
/// trial's token: whichever format the program speaks, it finds the gateway and nothing else.
fn gateway_env(ctx: &LaunchContext<'_>) -> Vec<(String, String)> {
    let v1 = format!("{}/v1", ctx.base_url);
    [
        ("GEODE_GATEWAY_URL", ctx.base_url.to_string()),
        ("GEODE_GATEWAY_TOKEN", ctx.token.to_string()),
        ("GEODE_MODEL", ctx.model.unwrap_or_default().to_string()),
        ("ANTHROPIC_BASE_URL", ctx.base_url.to_string()),
        ("ANTHROPIC_API_KEY", ctx.token.to_string()),
        ("OPENAI_BASE_URL", v1.clone()),
        ("OPENAI_API_BASE", v1),
        ("OPENAI_API_KEY", ctx.token.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> LaunchContext<'static> {
        LaunchContext {
            instruction: "fix the bug; then say done",
            model: Some("claude-sonnet-4-5"),
            base_url: "http://127.0.0.1:4000",
            token: "geode-trial-abc",
        }
    }

    #[test]
    fn every_agent_reaches_only_the_gateway_with_the_trial_token() {
        for agent in &BUILTIN {
            let launch = agent.launch(&ctx());
            assert_eq!(launch.argv[0], agent.program(), "{}", agent.name);
            assert!(
                launch
                    .argv
                    .iter()
                    .any(|a| a == "fix the bug; then say done"),
                "{}: the instruction is one argument",
                agent.name
            );
            for (key, value) in &launch.env {
                if key.ends_with("_KEY") || key.ends_with("TOKEN") {
                    assert_eq!(value, "geode-trial-abc", "{}: {key}", agent.name);
                }
                if key.ends_with("_URL") || key.ends_with("_BASE") {
                    assert!(value.starts_with("http://127.0.0.1:4000"), "{key}={value}");
                }
            }
        }
    }

    #[test]
    fn codex_is_told_the_gateway_as_its_responses_provider() {
        let codex = BUILTIN.iter().find(|a| a.name == "codex").unwrap();
        let argv = codex.launch(&ctx()).argv.join(" ");
        assert!(
            argv.contains("model_providers.geode.base_url=\"http://127.0.0.1:4000/v1\""),
            "{argv}"
        );
        assert!(argv.contains("wire_api=\"responses\""), "{argv}");
    }

    #[test]
    fn a_command_agent_runs_in_sh_with_the_instruction_in_its_environment() {
        let launch = command_launch("./solve --fast", &ctx());
        assert_eq!(launch.argv, ["/bin/sh", "-c", "./solve --fast"]);
        assert!(launch.env.contains(&(
            "GEODE_INSTRUCTION".into(),
            "fix the bug; then say done".into()
        )));
    }
}
