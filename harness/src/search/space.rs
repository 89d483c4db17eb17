//! The search space (`geode.search-space.v1`, TOML): which scaffold knobs may change and to
//! what, and which parts of the evaluation are frozen.
//!
//! ```toml
//! schema = "geode.search-space.v1"
//! [frozen]
//! grader = "geode.grader.tests.v1"   # must equal the grader campaigns use
//! [[knob]]
//! path = "repair_budget"              # dotted path into the scaffold's JSON
//! int = { min = 0, max = 3, step = 1 }
//! [[knob]]
//! path = "reflection"
//! values = ["off", "model_call"]      # an enumeration
//! [[knob]]
//! path = "compaction.threshold"
//! float = { min = 0.5, max = 0.9, step = 0.1 }
//! [[knob]]
//! path = "system_prompt.0"            # an alternative-text slot for a prompt section
//! text = ["You are GEODE ...", "You are a careful engineer ..."]
//! ```
//!
//! Every scaffold field not named by a knob is frozen: a candidate differing from its parent
//! anywhere else is refused ([`SearchSpace::check_candidate`]).

use std::path::Path;

use geode_runtime::scaffold::Scaffold;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SearchError;
use crate::crucible::TESTS_GRADER;

pub(crate) const SPACE_SCHEMA: &str = "geode.search-space.v1";

/// An integer domain: `min`, `min + step`, ... up to `max`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntRange {
    /// The smallest value.
    pub min: i64,
    /// The largest value allowed; reached only if a step lands on it.
    pub max: i64,
    /// The distance between values, at least 1 (default 1).
    #[serde(default = "one")]
    pub step: i64,
}

fn one() -> i64 {
    1
}

/// A float domain: `min`, `min + step`, ... up to `max`, rounded to 1e-9.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloatRange {
    /// The smallest value.
    pub min: f64,
    /// The largest value allowed.
    pub max: f64,
    /// The distance between values, above 0.
    pub step: f64,
}

/// One knob: a scaffold path and its domain (exactly one of `values`, `int`, `float`, `text`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knob {
    /// The scaffold field the knob sets, as a dotted path.
    pub path: String,
    /// Explicit values of any type, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<Value>>,
    /// An integer range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<IntRange>,
    /// A float range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub float: Option<FloatRange>,
    /// Strings, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<Vec<String>>,
}

/// The parts of the evaluation no candidate may change; checked when the search starts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frozen {
    /// The grader identity (today only [`TESTS_GRADER`]).
    #[serde(default)]
    pub grader: Option<String>,
    /// The evaluator's version (`geode --version`); `None`: whichever runs the search.
    #[serde(default)]
    pub evaluator_version: Option<String>,
    /// Pack hashes of the train and test packs, if pinned here.
    #[serde(default)]
    pub train_pack: Option<String>,
    #[serde(default)]
    pub(crate) test_pack: Option<String>,
    /// The model route of both arms, if pinned here.
    #[serde(default)]
    pub model: Option<String>,
}

/// A search space file (TOML, `geode.search-space.v1`): its knobs and what is frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    /// Always `geode.search-space.v1`.
    pub schema: String,
    /// What no candidate may change.
    #[serde(default)]
    pub frozen: Frozen,
    /// The knobs (`[[knob]]` tables), in file order: the grid order.
    #[serde(rename = "knob", default)]
    pub knobs: Vec<Knob>,
}

/// One change of one knob: the unit every policy proposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mutation {
    /// The knob's dotted path in the scaffold.
    pub path: String,
    /// The new value.
    pub value: Value,
}

impl std::fmt::Display for Mutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = match &self.value {
            Value::String(s) if s.chars().count() > 40 => {
                format!("{:?}...", s.chars().take(37).collect::<String>())
            }
            v => v.to_string(),
        };
        write!(f, "{}={}", self.path, v)
    }
}

impl Knob {
    /// Every value the knob may take, in a fixed order (grid order).
    pub fn domain(&self) -> Vec<Value> {
        if let Some(v) = &self.values {
            return v.clone();
        }
        if let Some(r) = &self.int {
            let mut out = Vec::new();
            let mut x = r.min;
            while x <= r.max {
                out.push(Value::from(x));
                x += r.step;
            }
            return out;
        }
        if let Some(r) = &self.float {
            let n = ((r.max - r.min) / r.step + 1e-9).floor() as i64;
            // Values are rounded to 1e-9 so 0.1 + 0.2 steps compare and hash stably.
            return (0..=n)
                .map(|i| {
                    let x = r.min + i as f64 * r.step;
                    Value::from((x * 1e9).round() / 1e9)
                })
                .collect();
        }
        self.text
            .as_ref()
            .map(|t| t.iter().map(|s| Value::String(s.clone())).collect())
            .unwrap_or_default()
    }
}

impl SearchSpace {
    /// Reads and validates a space file; errors name the file and the field at fault.
    pub fn load(path: &Path) -> Result<SearchSpace, SearchError> {
        let text = std::fs::read_to_string(path).map_err(|e| SearchError::file(path, e))?;
        let space: SearchSpace = toml::from_str(&text).map_err(|e| SearchError::Format {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        space
            .validate()
            .map_err(|(field, message)| SearchError::Field {
                path: path.display().to_string(),
                field,
                message,
            })?;
        Ok(space)
    }

    /// Checks the schema, every knob's domain, and that every domain value lands in a scaffold
    /// (a misspelled path would silently vanish on the round trip, so it is caught here).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.schema != SPACE_SCHEMA {
            return Err(("schema".into(), format!("expected {SPACE_SCHEMA:?}")));
        }
        if let Some(g) = &self.frozen.grader
            && g != TESTS_GRADER
        {
            return Err((
                "frozen.grader".into(),
                format!("{g:?} is not the grader campaigns use ({TESTS_GRADER})"),
            ));
        }
        if self.knobs.is_empty() {
            return Err(("knob".into(), "the space has no knob".into()));
        }
        let base = Scaffold::default();
        for (i, k) in self.knobs.iter().enumerate() {
            let field = |f: &str| format!("knob[{i}].{f}");
            let kinds = [
                k.values.is_some(),
                k.int.is_some(),
                k.float.is_some(),
                k.text.is_some(),
            ];
            if kinds.iter().filter(|b| **b).count() != 1 {
                return Err((
                    field("path"),
                    format!("{}: give exactly one of values, int, float, text", k.path),
                ));
            }
            if let Some(r) = &k.int
                && (r.step <= 0 || r.min > r.max)
            {
                return Err((field("int"), "needs min <= max and step > 0".into()));
            }
            if let Some(r) = &k.float
                && (r.step.is_nan()
                    || r.step <= 0.0
                    || !r.min.is_finite()
                    || !r.max.is_finite()
                    || r.min > r.max)
            {
                return Err((
                    field("float"),
                    "needs finite min <= max and step > 0".into(),
                ));
            }
            if self.knobs[..i].iter().any(|o| o.path == k.path) {
                return Err((field("path"), format!("{} is named twice", k.path)));
            }
            let domain = k.domain();
            if domain.len() < 2 {
                return Err((field("path"), format!("{}: fewer than two values", k.path)));
            }
            for v in domain {
                let m = Mutation {
                    path: k.path.clone(),
                    value: v,
                };
                apply(&base, &m).map_err(|e| (field("path"), e))?;
            }
        }
        Ok(())
    }

    /// Knobs validated together with the scaffold they start from: a value that no setting of
    /// the other knobs and frozen fields lets take effect is refused, with the reason.
    ///
    /// The one interaction known today: the convergence guard ends a turn at the w-th identical
    /// failure in a row (`guards.convergence_window = w`, 0 = off), so a repair budget b >= w
    /// never runs its last repairs when each attempt fails alike, which is how a model that
    /// cannot solve a task fails (and how `flaky-oracle` does): budgets 2 and 3 measure the same
    /// under the default window of 3.
    pub fn check_interactions(&self, baseline: &Scaffold) -> Result<(), (String, String)> {
        const REPAIRS: &str = "repair_budget";
        const WINDOW: &str = "guards.convergence_window";
        let Some((i, repairs)) = self
            .knobs
            .iter()
            .enumerate()
            .find(|(_, k)| k.path == REPAIRS)
        else {
            return Ok(());
        };
        let windows: Vec<u64> = match self.knob(WINDOW) {
            Some(k) => k.domain().iter().filter_map(Value::as_u64).collect(),
            None => vec![baseline.guards.convergence_window as u64],
        };
        let frozen = self.knob(WINDOW).is_none();
        for b in repairs.domain().iter().filter_map(Value::as_u64) {
            if windows.iter().all(|&w| w > 0 && b >= w) {
                let widest = windows.iter().copied().max().unwrap_or(0);
                return Err((
                    format!("knob[{i}].values"),
                    format!(
                        "{REPAIRS} = {b} cannot take effect: {WINDOW} = {widest}{} ends a turn at \
                         its {widest}th identical failure, before repair {b} runs; raise the \
                         window above {b} (or to 0, off) or drop the value",
                        if frozen { " (frozen)" } else { " at most" }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The knob at this dotted path.
    pub fn knob(&self, path: &str) -> Option<&Knob> {
        self.knobs.iter().find(|k| k.path == path)
    }

    /// A mutation is allowed if its knob is in the space and its value in the knob's domain.
    pub fn check_mutation(&self, m: &Mutation) -> Result<(), String> {
        let Some(k) = self.knob(&m.path) else {
            return Err(format!("{} is not a knob of the search space", m.path));
        };
        if !k.domain().iter().any(|v| same_value(v, &m.value)) {
            return Err(format!("{} is outside the domain of {}", m.value, m.path));
        }
        Ok(())
    }

    /// A candidate may differ from its parent only at knob paths (everything else is frozen).
    pub fn check_candidate(&self, parent: &Scaffold, candidate: &Scaffold) -> Result<(), String> {
        for d in diff(parent, candidate) {
            if !self
                .knobs
                .iter()
                .any(|k| d.path == k.path || d.path.starts_with(&format!("{}.", k.path)))
            {
                return Err(format!("{} is frozen but the candidate changes it", d.path));
            }
        }
        Ok(())
    }
}

/// Numbers compare by value (a TOML `2` and a JSON `2.0` are the same knob value).
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() < 1e-9,
        _ => a == b,
    }
}

/// The scaffold as JSON with every field present (default compaction limits are skipped on
/// serialization; they are put back so every path resolves).
fn full_json(s: &Scaffold) -> Result<Value, String> {
    let mut v = serde_json::to_value(s).map_err(|e| e.to_string())?;
    if let Some(obj) = v.as_object_mut()
        && !obj.contains_key("compaction")
    {
        let c = serde_json::to_value(&s.compaction).map_err(|e| e.to_string())?;
        obj.insert("compaction".into(), c);
    }
    Ok(v)
}

fn slot<'a>(root: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut at = root;
    for seg in path.split('.') {
        at = match at {
            Value::Object(o) => o.get_mut(seg)?,
            Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// The value at a dotted path of the scaffold, if the path exists.
pub fn get(s: &Scaffold, path: &str) -> Option<Value> {
    let mut v = full_json(s).ok()?;
    slot(&mut v, path).map(|x| x.clone())
}

/// The scaffold with one knob set; the result must deserialize and read back the same value.
pub fn apply(s: &Scaffold, m: &Mutation) -> Result<Scaffold, String> {
    let mut v = full_json(s)?;
    let Some(at) = slot(&mut v, &m.path) else {
        return Err(format!("{} is not a field of the scaffold", m.path));
    };
    *at = m.value.clone();
    let out: Scaffold = serde_json::from_value(v)
        .map_err(|e| format!("{} = {}: not a valid scaffold value ({e})", m.path, m.value))?;
    match get(&out, &m.path) {
        Some(back) if same_value(&back, &m.value) => Ok(out),
        _ => Err(format!(
            "{} = {}: the scaffold does not keep this value",
            m.path, m.value
        )),
    }
}

/// One difference between two scaffolds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// The dotted path of the leaf that differs.
    pub path: String,
    /// Its value in the first scaffold.
    pub before: Value,
    /// Its value in the second.
    pub after: Value,
}

/// Leaf-level differences between two scaffolds, as dotted paths, in field order.
pub fn diff(a: &Scaffold, b: &Scaffold) -> Vec<Difference> {
    let (Ok(x), Ok(y)) = (full_json(a), full_json(b)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    walk("", &x, &y, &mut out);
    out
}

fn walk(prefix: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.dedup();
            let mut seen = std::collections::BTreeSet::new();
            for k in keys {
                if seen.insert(k.clone()) {
                    walk(
                        &join(k),
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        out,
                    );
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&join(&i.to_string()), p, q, out);
            }
        }
        _ if same_value(a, b) => {}
        _ => out.push(Difference {
            path: prefix.to_string(),
            before: a.clone(),
            after: b.clone(),
        }),
    }
}
