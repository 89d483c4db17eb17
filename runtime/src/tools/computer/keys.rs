//! Key names as models write them (xdotool's: `Return`, `ctrl+a`, `shift+Tab`) and characters
//! to type, as X keysyms.
//!
//! Keysyms are the layout-independent names of keys; the display side looks up which keycode
//! of the server's keyboard map carries each one.

use super::action::ComputerError;

/// Keysyms of the modifier keys a chord may hold.
pub const SHIFT_L: u32 = 0xffe1;
pub(crate) const CONTROL_L: u32 = 0xffe3;
pub(crate) const ALT_L: u32 = 0xffe9;
pub(crate) const SUPER_L: u32 = 0xffeb;

/// A chord: modifiers held (in order) around one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chord {
    pub(crate) modifiers: Vec<u32>,
    pub(crate) key: u32,
}

/// Named keys, with the aliases models commonly use. Names compare case-insensitively.
const NAMED: &[(&str, u32)] = &[
    ("return", 0xff0d),
    ("enter", 0xff0d),
    ("tab", 0xff09),
    ("escape", 0xff1b),
    ("esc", 0xff1b),
    ("backspace", 0xff08),
    ("delete", 0xffff),
    ("insert", 0xff63),
    ("home", 0xff50),
    ("end", 0xff57),
    ("left", 0xff51),
    ("up", 0xff52),
    ("right", 0xff53),
    ("down", 0xff54),
    ("page_up", 0xff55),
    ("prior", 0xff55),
    ("page_down", 0xff56),
    ("next", 0xff56),
    ("space", 0x20),
    ("minus", 0x2d),
    ("plus", 0x2b),
    ("equal", 0x3d),
    ("comma", 0x2c),
    ("period", 0x2e),
    ("slash", 0x2f),
    ("shift", SHIFT_L),
    ("shift_l", SHIFT_L),
    ("ctrl", CONTROL_L),
    ("control", CONTROL_L),
    ("control_l", CONTROL_L),
    ("alt", ALT_L),
    ("alt_l", ALT_L),
    ("super", SUPER_L),
    ("super_l", SUPER_L),
    ("cmd", SUPER_L),
    ("meta", SUPER_L),
];

/// The keysym of one key name: a named key, `F1`..`F35`, or a single character.
pub fn keysym_of_name(name: &str) -> Result<u32, ComputerError> {
    let lower = name.to_ascii_lowercase();
    if let Some((_, sym)) = NAMED.iter().find(|(n, _)| *n == lower) {
        return Ok(*sym);
    }
    if let Some(n) = lower.strip_prefix('f').and_then(|n| n.parse::<u32>().ok())
        && (1..=35).contains(&n)
    {
        return Ok(0xffbe + n - 1);
    }
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => Ok(keysym_of_char(c)),
        _ => Err(ComputerError::UnknownKey(name.to_string())),
    }
}

/// A chord written as names joined by `+` (`ctrl+shift+t`); the last name is the key.
pub fn parse_chord(text: &str) -> Result<Chord, ComputerError> {
    let text = text.trim();
    // `ctrl++` means ctrl and the plus key: a trailing `+` after a `+` is the key itself.
    let (head, last) = match text.strip_suffix("++") {
        Some(head) => (head, "+"),
        None => match text.rsplit_once('+') {
            Some((head, last)) => (head, last),
            None => ("", text),
        },
    };
    if last.is_empty() {
        return Err(ComputerError::UnknownKey(text.to_string()));
    }
    let modifiers = head
        .split('+')
        .filter(|m| !m.is_empty())
        .map(keysym_of_name)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Chord {
        modifiers,
        key: keysym_of_name(last)?,
    })
}

/// The keysym that types `c`: Latin-1 characters are their own keysym, control characters
/// map to their keys, everything else is Unicode keysym space (0x0100_0000 + code point).
pub fn keysym_of_char(c: char) -> u32 {
    match c {
        '\n' | '\r' => 0xff0d,
        '\t' => 0xff09,
        '\u{8}' => 0xff08,
        ' '..='~' | '\u{a0}'..='\u{ff}' => u32::from(c),
        _ => 0x0100_0000 + u32::from(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_parse_as_xdotool_writes_them() {
        assert_eq!(
            parse_chord("ctrl+a").unwrap(),
            Chord {
                modifiers: vec![CONTROL_L],
                key: u32::from('a')
            }
        );
        assert_eq!(parse_chord("Return").unwrap().key, 0xff0d);
        assert_eq!(parse_chord("shift+Tab").unwrap().modifiers, vec![SHIFT_L]);
        assert_eq!(parse_chord("F5").unwrap().key, 0xffc2);
        assert_eq!(parse_chord("ctrl++").unwrap().key, u32::from('+'));
        assert!(matches!(
            parse_chord("ctrl+Hyperdrive"),
            Err(ComputerError::UnknownKey(name)) if name == "Hyperdrive"
        ));
        assert!(parse_chord("").is_err());
    }

    #[test]
    fn characters_map_to_latin1_or_unicode_keysyms() {
        assert_eq!(keysym_of_char('A'), 0x41);
        assert_eq!(keysym_of_char('\n'), 0xff0d);
        assert_eq!(keysym_of_char('é'), 0xe9);
        assert_eq!(keysym_of_char('€'), 0x0100_20ac);
    }
}
