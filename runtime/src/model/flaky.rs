//! `flaky-oracle:P`: an embedded *simulation* model for offline research runs, clearly not an
//! agent. Each attempt runs the task's reference solution with probability P (drawn from a
//! ChaCha stream seeded per trial), and otherwise runs a command that fails, then claims success
//! without addressing the failure. The rule-based verifier catches that claim, so the scaffold's
//! repair budget has a real causal effect through the runtime: with budget b the success rate is
//! 1 - (1 - P)^(b + 1).
//!
//! `flaky-oracle:P:tamper` additionally tries to write the reward file before each attempt, an
//! integrity signal the harness records (used to test the crucible's safety veto).
//!
//! The route grammar (`catalog::EmbeddedRoute::FlakyOracle`) parses P and the flag; a
//! benchmark trial builds this model, since only it has the solution and the seed.

use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::json;

use super::{Model, ModelError, ModelRequest};
use crate::conversation::{AssistantTurn, ContentBlock, Message, Role, StopReason, Usage};

/// The `flaky-oracle:P[:tamper]` simulation model; see the module docs.
#[derive(Debug)]
pub struct FlakyOracle {
    solve_sh: PathBuf,
    p: f64,
    tamper: bool,
    rng: Mutex<ChaCha20Rng>,
    attempts: Mutex<u32>,
}

impl FlakyOracle {
    /// A model over the solution `solve_sh` that succeeds with chance `p` (clamped to 0..1) per
    /// attempt, its draws seeded by `seed`.
    pub fn new(solve_sh: PathBuf, p: f64, tamper: bool, seed: u64) -> Self {
        FlakyOracle {
            solve_sh,
            p: p.clamp(0.0, 1.0),
            tamper,
            rng: Mutex::new(ChaCha20Rng::seed_from_u64(seed)),
            attempts: Mutex::new(0),
        }
    }
}

fn turn(content: Vec<ContentBlock>, stop: StopReason) -> AssistantTurn {
    AssistantTurn {
        message: Message {
            role: Role::Assistant,
            content,
        },
        usage: Usage::default(),
        stop_reason: stop,
    }
}

#[async_trait]
impl Model for FlakyOracle {
    fn id(&self) -> &str {
        "flaky-oracle"
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        // After a tool result the attempt is over: claim success either way, as a careless
        // agent would. The verifier decides whether the claim stands.
        let answered = request.messages.last().is_some_and(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        });
        if answered || request.force_text {
            return Ok(turn(
                vec![ContentBlock::Text {
                    text: "Done: the task is complete.".into(),
                }],
                StopReason::EndTurn,
            ));
        }
        let n = {
            let mut a = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
            *a += 1;
            *a
        };
        let succeed = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random_bool(self.p);
        let quoted = format!(
            "'{}'",
            self.solve_sh.display().to_string().replace('\'', r"'\''")
        );
        let mut command = String::new();
        if self.tamper {
            command.push_str("echo 1 > /logs/verifier/reward.txt 2>/dev/null; ");
        }
        if succeed {
            command.push_str(&format!("bash {quoted}"));
        } else {
            command.push_str("echo 'attempt went wrong' >&2; exit 3");
        }
        Ok(turn(
            vec![ContentBlock::ToolUse {
                id: format!("flaky_{n}"),
                name: "bash".into(),
                input: json!({ "command": command }),
            }],
            StopReason::ToolUse,
        ))
    }
}
