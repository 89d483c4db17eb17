//! A serializer that writes nothing and only looks for NaN and infinities, with the path to them.
//!
//! serde_json turns a non-finite float into `null` without a word, in `to_value` as in
//! `to_string`, so the check has to happen on the typed value before it reaches serde_json.

use std::fmt;

use serde::ser::{self, Serialize};

use crate::error::CanonicalError;

pub(super) fn check_finite<T: Serialize + ?Sized>(value: &T) -> Result<(), CanonicalError> {
    let mut checker = Checker { path: Vec::new() };
    value.serialize(&mut checker).map_err(|e| match e {
        CheckError::NonFinite { path, value } => CanonicalError::NonFinite { path, value },
        CheckError::Custom(m) => CanonicalError::Serialize(m),
    })
}

struct Checker {
    path: Vec<String>,
}

impl Checker {
    fn path_string(&self) -> String {
        let mut s = String::new();
        for part in &self.path {
            if !part.starts_with('[') && !s.is_empty() {
                s.push('.');
            }
            s.push_str(part);
        }
        if s.is_empty() { "<root>".to_owned() } else { s }
    }

    fn float(&self, v: f64) -> Result<(), CheckError> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(CheckError::NonFinite {
                path: self.path_string(),
                value: v,
            })
        }
    }

    fn nested<T: Serialize + ?Sized>(&mut self, part: String, v: &T) -> Result<(), CheckError> {
        self.path.push(part);
        let r = v.serialize(&mut *self);
        self.path.pop();
        r
    }
}

#[derive(Debug)]
enum CheckError {
    NonFinite { path: String, value: f64 },
    Custom(String),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::NonFinite { path, value } => write!(f, "non-finite {value} at {path}"),
            CheckError::Custom(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CheckError {}

impl ser::Error for CheckError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        CheckError::Custom(msg.to_string())
    }
}

/// Compound-value state: the checker plus the index of the next element.
struct Compound<'a> {
    checker: &'a mut Checker,
    index: usize,
    key: Option<String>,
}

type R = Result<(), CheckError>;

impl<'a> ser::Serializer for &'a mut Checker {
    type Ok = ();
    type Error = CheckError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, _: bool) -> R {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> R {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> R {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> R {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> R {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> R {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> R {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> R {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> R {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> R {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> R {
        self.float(v)
    }
    fn serialize_char(self, _: char) -> R {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> R {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> R {
        Ok(())
    }
    fn serialize_none(self) -> R {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> R {
        v.serialize(self)
    }
    fn serialize_unit(self) -> R {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> R {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> R {
        self.nested(variant.to_owned(), v)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, CheckError> {
        Ok(Compound {
            checker: self,
            index: 0,
            key: None,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(len)
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CheckError> {
        self.serialize_seq(Some(len))
    }
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        let part = format!("[{}]", self.index);
        self.index += 1;
        self.checker.nested(part, v)
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        self.element(v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        self.element(v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        self.element(v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        self.element(v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> R {
        // Keys become strings in JSON; a float key is checked like any float.
        key.serialize(&mut *self.checker)?;
        let name = match serde_json::to_value(key) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => return Err(CheckError::Custom(e.to_string())),
        };
        self.key = Some(name);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> R {
        let part = self.key.take().unwrap_or_else(|| "?".to_owned());
        self.checker.nested(part, v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> R {
        self.checker.nested(key.to_owned(), v)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, v: &T) -> R {
        self.checker.nested(key.to_owned(), v)
    }
    fn end(self) -> R {
        Ok(())
    }
}
