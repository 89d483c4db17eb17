//! Canonical JSON (RFC 8785 style) and its SHA-256: the form of every hashed document.
//!
//! Rules, so any implementation can reproduce a hash:
//! - object keys sorted by their UTF-16 code units (RFC 8785), whatever order the serializer
//!   produced (this does not depend on serde_json's `preserve_order` feature);
//! - no whitespace; strings escaped as JSON requires (`\"`, `\\`, `\b \f \n \r \t`, other
//!   control characters as lower-case `\u00xx`), everything else as UTF-8;
//! - floats in ECMAScript `Number.toString` form (shortest round-trip digits; `1` not `1.0`,
//!   `1e-7`, `1e+21`, `-0` as `0`);
//! - integers (JSON numbers that serde holds as `u64`/`i64`) printed exactly. This departs from
//!   RFC 8785, which would round them through an IEEE double: seeds are 64-bit and must survive;
//! - NaN and infinities are refused with an error naming the field ([`CanonicalError::NonFinite`]),
//!   instead of serde_json's silent `null`.

mod finite;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::CanonicalError;

/// Canonical JSON text of `value`.
pub fn to_canonical_json<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    finite::check_finite(value)?;
    let tree = serde_json::to_value(value).map_err(|e| CanonicalError::Serialize(e.to_string()))?;
    let mut out = String::new();
    write_value(&tree, &mut out);
    Ok(out)
}

/// SHA-256 of the canonical JSON of `value`, as raw bytes.
pub fn canonical_sha256<T: Serialize + ?Sized>(value: &T) -> Result<[u8; 32], CanonicalError> {
    let text = to_canonical_json(value)?;
    Ok(Sha256::digest(text.as_bytes()).into())
}

fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(f) = n.as_f64() {
                out.push_str(&format_f64(f));
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(val, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// ECMAScript `Number.prototype.toString` for a finite double.
fn format_f64(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{x:e}");
    let (neg, sci) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    // value = 0.d1d2...dk * 10^n
    let n = exp + 1;
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if k <= n && n <= 21 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        s.push_str(&digits[..n as usize]);
        s.push('.');
        s.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        s.push_str("0.");
        s.extend(std::iter::repeat_n('0', (-n) as usize));
        s.push_str(&digits);
    } else {
        s.push_str(&digits[..1]);
        if k > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if n > 0 { '+' } else { '-' });
        s.push_str(&(n - 1).abs().to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_follow_ecmascript() {
        let cases = [
            (1.0, "1"),
            (0.95, "0.95"),
            (-0.0, "0"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (1e21, "1e+21"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.5e300, "1.5e+300"),
            (-2.5, "-2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (x, want) in cases {
            assert_eq!(format_f64(x), want, "{x}");
        }
    }

    #[test]
    fn keys_sorted_no_whitespace_integers_exact() {
        let v = json!({"b": [1, 2.0, "x\n"], "a": {"z": null, "y": true}, "s": u64::MAX});
        assert_eq!(
            to_canonical_json(&v).unwrap(),
            "{\"a\":{\"y\":true,\"z\":null},\"b\":[1,2,\"x\\n\"],\"s\":18446744073709551615}"
        );
    }

    #[test]
    fn non_finite_is_refused_with_path() {
        #[derive(Serialize)]
        struct Inner {
            x: f64,
        }
        #[derive(Serialize)]
        struct Outer {
            rule: Inner,
            list: Vec<f64>,
        }
        let e = to_canonical_json(&Outer {
            rule: Inner { x: f64::NAN },
            list: vec![],
        })
        .unwrap_err();
        assert!(e.to_string().contains("rule.x"), "{e}");
        let e = to_canonical_json(&Outer {
            rule: Inner { x: 1.0 },
            list: vec![0.0, f64::INFINITY],
        })
        .unwrap_err();
        assert!(e.to_string().contains("list[1]"), "{e}");
    }
}
