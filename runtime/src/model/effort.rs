//! Effort levels: how hard a model may think before it answers.
//!
//! One ordered scale for every provider, `none < minimal < low < medium < high < xhigh < max`.
//! Each catalog model lists the levels it accepts; a request is clamped to that list, so a
//! setting made for one model never reaches another provider as a value it rejects.

use serde::{Deserialize, Serialize};

/// One spelling per level: serde (config, checkpoint state), `Display`, `FromStr` and
/// [`Effort::as_str`] all derive from `snake_case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum Effort {
    /// No thinking.
    None,
    /// The least thinking a model that always thinks allows.
    Minimal,
    /// Little thinking.
    Low,
    /// Moderate thinking.
    Medium,
    /// Much thinking.
    High,
    /// More than `High`, where a model offers it.
    Xhigh,
    /// The most a model offers.
    Max,
}

impl Effort {
    /// Every level, from `None` to `Max`.
    pub const ALL: [Effort; 7] = [
        Effort::None,
        Effort::Minimal,
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::Xhigh,
        Effort::Max,
    ];

    /// The snake_case name, as config files and requests write it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The level of a snake_case name; `None` for an unknown one.
    pub fn parse(s: &str) -> Option<Effort> {
        s.parse().ok()
    }

    /// The nearest level `supported` accepts: the request itself when listed, else the highest
    /// listed level below it, else the lowest listed level above it. A request for some
    /// thinking is never turned into `none`: asking for effort and silently getting none would
    /// change what the model does more than rounding up does.
    pub fn clamp_to(self, supported: &[Effort]) -> Effort {
        if supported.contains(&self) {
            return self;
        }
        let below = supported
            .iter()
            .copied()
            .filter(|e| *e < self && *e != Effort::None)
            .max();
        let above = supported.iter().copied().filter(|e| *e > self).min();
        below.or(above).unwrap_or(self)
    }
}

#[cfg(test)]
mod tests {
    use super::Effort::*;
    use super::*;

    #[test]
    fn levels_are_ordered() {
        assert!(None < Minimal && Minimal < Low && Low < Medium);
        assert!(Medium < High && High < Xhigh && Xhigh < Max);
        for e in Effort::ALL {
            assert_eq!(Effort::parse(e.as_str()), Some(e));
        }
    }

    #[test]
    fn clamp_rounds_down_then_up_and_never_to_none() {
        let anthropic = [Low, Medium, High, Max];
        assert_eq!(Xhigh.clamp_to(&anthropic), High);
        assert_eq!(Max.clamp_to(&anthropic), Max);
        assert_eq!(Minimal.clamp_to(&anthropic), Low);
        assert_eq!(None.clamp_to(&anthropic), Low);
        let on_off = [None, High];
        assert_eq!(Medium.clamp_to(&on_off), High);
        assert_eq!(Max.clamp_to(&on_off), High);
        assert_eq!(None.clamp_to(&on_off), None);
        let openai = [Minimal, Low, Medium, High];
        assert_eq!(None.clamp_to(&openai), Minimal);
        assert_eq!(Max.clamp_to(&openai), High);
    }
}
