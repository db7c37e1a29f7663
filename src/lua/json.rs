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
