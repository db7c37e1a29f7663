//! The sequences of a diversity JSON cache read back as row indices (what `diversity update`
//! grows from), streamed with serde_json: one row at a time is held as JSON, the result as
//! uint32. May touch the file it reads and the crate's errors; nothing else.

use crate::error::Result;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// What a row's keys and entries are matched against: the table's ids (an entry's JSON text,
/// a key's text) or, without ids, the decimal indices.
struct Ids {
    by_value: HashMap<String, u32>,
    by_key: HashMap<String, u32>,
}

impl Ids {
    fn new(ids: Option<&[Value]>, n: usize) -> Ids {
        let mut by_value = HashMap::with_capacity(n);
        let mut by_key = HashMap::with_capacity(n);
        for i in 0..n {
            let (value, key) = match ids.and_then(|ids| ids.get(i)) {
                Some(Value::String(s)) => (Value::String(s.clone()).to_string(), s.clone()),
                Some(v) => (v.to_string(), v.to_string()),
                None => (i.to_string(), i.to_string()),
            };
            by_value.insert(value, i as u32);
            by_key.insert(key, i as u32);
        }
        Ids { by_value, by_key }
    }
}

/// The file's `sequences` object into `rows` (n rows of `len`).
struct Sequences<'a> {
    ids: &'a Ids,
    rows: &'a mut Vec<u32>,
    seen: &'a mut Vec<bool>,
    len: usize,
}

impl<'de> Visitor<'de> for Sequences<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object of sequences {\"<id>\": [id, …]}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        use serde::de::Error as _;
        while let Some(key) = map.next_key::<String>()? {
            let Some(&i) = self.ids.by_key.get(&key) else {
                return Err(A::Error::custom(format!(
                    "the key {key:?} is no item of the table"
                )));
            };
            let row: Vec<Value> = map.next_value()?;
            if row.len() != self.len || self.seen[i as usize] {
                return Err(A::Error::custom(format!(
                    "the sequence of {key:?} has {} entries, not {}, or comes twice",
                    row.len(),
                    self.len
                )));
            }
            self.seen[i as usize] = true;
            let out = &mut self.rows[i as usize * self.len..(i as usize + 1) * self.len];
            for (o, v) in out.iter_mut().zip(&row) {
                *o = *self.ids.by_value.get(&v.to_string()).ok_or_else(|| {
                    A::Error::custom(format!(
                        "the sequence of {key:?} holds {v}, no item of the table"
                    ))
                })?;
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Sequences<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// The top level: `sequences` read, everything else skipped.
struct Top<'a>(Sequences<'a>);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON cache {\"metadata\":{…}, \"sequences\":{…}}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<bool, A::Error> {
        let mut seq = Some(self.0);
        while let Some(key) = map.next_key::<String>()? {
            match (key.as_str(), seq.take()) {
                ("sequences", Some(s)) => map.next_value_seed(s)?,
                (_, s) => {
                    seq = s;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(seq.is_none())
    }
}

/// The sequences of the diversity JSON cache at `path` as row indices: `n` rows (every start of
/// the table, in row order) of `len` entries, keys and entries matched to the table's `ids`
/// (its row indices without ids). A missing or extra row, another length, or an id that is not
/// the table's is a `Format` error naming the file.
pub fn read_sequence_rows(
    path: &Path,
    ids: Option<&[Value]>,
    n: usize,
    len: usize,
) -> Result<Vec<u32>> {
    let (file, bad) = super::metadata::open_json(path)?;
    let ids = Ids::new(ids, n);
    let mut rows = vec![0u32; n * len];
    let mut seen = vec![false; n];
    let seq = Sequences {
        ids: &ids,
        rows: &mut rows,
        seen: &mut seen,
        len,
    };
    let mut de = serde_json::Deserializer::from_reader(file);
    let found = de
        .deserialize_map(Top(seq))
        .map_err(|e| bad(format!("{e}")))?;
    if !found {
        return Err(bad("no \"sequences\" object at the top level".into()));
    }
    if let Some(i) = seen.iter().position(|&s| !s) {
        return Err(bad(format!(
            "no sequence for row {i}: a cache of every start is needed"
        )));
    }
    Ok(rows)
}
