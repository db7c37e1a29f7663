//! JSON values to and from Lua values (row ids, cache metadata). May touch Lua values and
//! serde_json values; nothing else.

use super::error::msg;
use mlua::prelude::*;
use mlua::Value;

/// A JSON scalar as a Lua value (ids: strings, integers, numbers, booleans; anything else nil).
pub(super) fn json_to_lua(lua: &Lua, v: &serde_json::Value) -> LuaResult<Value> {
    Ok(match v {
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::Bool(b) => Value::Boolean(*b),
        _ => Value::Nil,
    })
}

/// How deep tables may nest in a value written as JSON: metadata and ids are shallow, and a
/// table that contains itself must be an error, not a recursion that overflows the stack.
const MAX_DEPTH: usize = 64;

/// A Lua value as JSON: tables with a sequence part become arrays, others objects; nesting
/// deeper than [`MAX_DEPTH`] (a table that contains itself, say) is refused.
pub(super) fn lua_to_json(call: &str, v: Value) -> LuaResult<serde_json::Value> {
    to_json(call, v, 0)
}

fn to_json(call: &str, v: Value, depth: usize) -> LuaResult<serde_json::Value> {
    if depth > MAX_DEPTH {
        return Err(msg(
            call,
            format!(
                "tables nested more than {MAX_DEPTH} deep cannot be written as JSON (does a \
                 table contain itself?)"
            ),
        ));
    }
    Ok(match v {
        Value::Nil => serde_json::Value::Null,
        Value::Boolean(b) => serde_json::Value::Bool(b),
        Value::Integer(i) => serde_json::Value::from(i),
        Value::Number(n) => {
            if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
                serde_json::Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n)
                    .map(serde_json::Value::Number)
                    .ok_or_else(|| msg(call, format!("{n} cannot be written as JSON")))?
            }
        }
        Value::String(s) => serde_json::Value::String(s.to_str()?.to_string()),
        Value::Table(t) => {
            let len = t.raw_len();
            if len > 0 {
                serde_json::Value::Array(
                    t.sequence_values::<Value>()
                        .map(|v| to_json(call, v?, depth + 1))
                        .collect::<LuaResult<_>>()?,
                )
            } else {
                let mut m = serde_json::Map::new();
                for pair in t.pairs::<String, Value>() {
                    let (k, v) = pair?;
                    m.insert(k, to_json(call, v, depth + 1)?);
                }
                serde_json::Value::Object(m)
            }
        }
        other => {
            return Err(msg(
                call,
                format!("cannot write a {} as JSON", other.type_name()),
            ))
        }
    })
}

/// A Lua array of ids (or any values) as JSON values.
pub(super) fn json_list(call: &str, t: &LuaTable) -> LuaResult<Vec<serde_json::Value>> {
    super::args::dense(call, "the list", t)?;
    t.sequence_values::<Value>()
        .map(|v| lua_to_json(call, v?))
        .collect()
}

/// JSON values as a 1-based Lua array.
pub(super) fn lua_list(lua: &Lua, values: &[serde_json::Value]) -> LuaResult<LuaTable> {
    let t = lua.create_table_with_capacity(values.len(), 0)?;
    for (i, v) in values.iter().enumerate() {
        t.raw_set(i + 1, json_to_lua(lua, v)?)?;
    }
    Ok(t)
}

/// Any JSON value as a Lua value: objects as tables, arrays as 1-based arrays, null as nil,
/// nesting up to [`MAX_DEPTH`].
fn decoded(lua: &Lua, v: &serde_json::Value, depth: usize) -> LuaResult<Value> {
    if depth > MAX_DEPTH {
        return Err(msg(
            "json_decode",
            format!("nested more than {MAX_DEPTH} deep"),
        ));
    }
    Ok(match v {
        serde_json::Value::Array(a) => {
            let t = lua.create_table_with_capacity(a.len(), 0)?;
            for (i, x) in a.iter().enumerate() {
                t.raw_set(i + 1, decoded(lua, x, depth + 1)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(o) => {
            let t = lua.create_table_with_capacity(0, o.len())?;
            for (k, x) in o {
                t.raw_set(k.as_str(), decoded(lua, x, depth + 1)?)?;
            }
            Value::Table(t)
        }
        scalar => json_to_lua(lua, scalar)?,
    })
}

/// `json_decode`, `json_encode`: one JSON text to a Lua value and back (for the query
/// command's JSON lines).
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // The Lua value of one JSON text (objects and arrays as tables, null as nil).
    super::set_function(lua, m, "json_decode", |lua, text: LuaString| {
        let v: serde_json::Value = serde_json::from_slice(&text.as_bytes())
            .map_err(|e| msg("json_decode", format!("not JSON: {e}")))?;
        decoded(lua, &v, 0)
    })?;
    // One line of JSON for a Lua value (tables with a sequence part as arrays, others objects).
    super::set_function(lua, m, "json_encode", |_, v: Value| {
        let j = lua_to_json("json_encode", v)?;
        serde_json::to_string(&j).map_err(|e| msg("json_encode", e))
    })
}
