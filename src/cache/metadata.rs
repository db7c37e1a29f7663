//! The `metadata` object of a JSON cache file (`{"metadata":{…}, …}`), read with serde_json: the
//! rest of the file is parsed but not kept, so a large cache costs one pass and no memory. May
//! touch the file it reads and the crate's errors; nothing else.

use crate::error::{Error, Result};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The cache's top-level object: only `metadata` is kept; every other key is skipped.
struct Head(Option<Map<String, Value>>);

impl<'de> serde::Deserialize<'de> for Head {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Head;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object {\"metadata\":{…}, …}")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Head, A::Error> {
                let mut meta = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" && meta.is_none() {
                        meta = Some(map.next_value()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Head(meta))
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON file to read, buffered, and the `Format` error naming it for a reason.
pub(super) fn open_json(
    path: &Path,
) -> Result<(
    std::io::BufReader<std::fs::File>,
    impl Fn(String) -> Error + '_,
)> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = move |reason: String| Error::Format {
        path: PathBuf::from(path),
        reason,
    };
    Ok((std::io::BufReader::with_capacity(1 << 20, file), bad))
}

/// The `metadata` object of the JSON cache at `path` (a diversity or rankings cache). A file
/// that is not JSON, or whose top level has no `metadata` object, is a `Format` error naming it.
pub fn read_metadata(path: &Path) -> Result<Map<String, Value>> {
    let (file, bad) = open_json(path)?;
    let head: Head =
        serde_json::from_reader(file).map_err(|e| bad(format!("not a JSON cache: {e}")))?;
    head.0
        .ok_or_else(|| bad("no \"metadata\" object at the top level".into()))
}
