//! Lua arguments to Rust values: integers checked the way the errors promise (named, never
//! truncated), index lists, option tables, the engine's enums, binary rows. May touch Lua values,
//! the binding's errors and the crate's enums.

use super::error::{msg, LuaCtx};
use crate::mode::Mode;
use crate::table::Precision;
use mlua::prelude::*;
use mlua::Value;

/// Field `key` of an optional options table. A boolean option must be a boolean and a number
/// option a number: Lua's truthiness would read the string `"false"` as true, and mlua
/// converts a numeric string to a number, so either would be quietly taken for something else.
pub(super) fn opt<T: FromLua + 'static>(t: &Option<LuaTable>, key: &str) -> LuaResult<Option<T>> {
    use std::any::TypeId;
    let Some(t) = t else { return Ok(None) };
    let v: Value = t.get(key)?;
    let want = TypeId::of::<T>();
    let numeric = [
        TypeId::of::<f64>(),
        TypeId::of::<f32>(),
        TypeId::of::<usize>(),
        TypeId::of::<u64>(),
        TypeId::of::<u32>(),
        TypeId::of::<i64>(),
        TypeId::of::<i32>(),
    ];
    let wrong = match &v {
        Value::Nil => return Ok(None),
        Value::Boolean(_) => want != TypeId::of::<bool>() && numeric.contains(&want),
        Value::Integer(_) | Value::Number(_) => want == TypeId::of::<bool>(),
        _ => want == TypeId::of::<bool>() || numeric.contains(&want),
    };
    if wrong {
        let shown = match &v {
            Value::String(s) => format!("the string {:?}", s.to_string_lossy()),
            other => format!("a {}", other.type_name()),
        };
        let kind = if want == TypeId::of::<bool>() {
            "a boolean (true or false)"
        } else {
            "a number"
        };
        return Err(LuaError::RuntimeError(format!(
            "option {key} must be {kind}, got {shown}"
        )));
    }
    t.get::<Option<T>>(key)
}

/// The `n` and `dim` arguments of a sizing call, as counts.
pub(super) fn dims(call: &str, n: &Value, d: &Value) -> LuaResult<(usize, usize)> {
    Ok((int(call, "n", n)? as usize, int(call, "dim", d)? as usize))
}

/// The optional `steps` argument of a sizing call: every step of N items (N − 1) when nil.
pub(super) fn steps_or_all(call: &str, steps: Option<Value>, n: usize) -> LuaResult<usize> {
    match steps.filter(|s| !s.is_nil()) {
        Some(s) => Ok(int(call, "steps", &s)? as usize),
        None => Ok(n.saturating_sub(1)),
    }
}

/// A non-negative integer argument, refused with a named error when it is negative, fractional
/// or not a number (mlua would truncate 1.5 to 1, or report a conversion in its own words).
pub(super) fn int(call: &str, what: &str, v: &Value) -> LuaResult<u64> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Number(n) => *n,
        other => {
            return Err(msg(
                call,
                format!(
                    "{what} must be a non-negative integer, got a {}",
                    other.type_name()
                ),
            ))
        }
    };
    if x < 0.0 {
        return Err(msg(call, format!("{what} {x} is negative")));
    }
    if x.fract() != 0.0 || !x.is_finite() || x > 9.007_199_254_740_992e15 {
        return Err(msg(call, format!("{what} must be an integer, got {x}")));
    }
    Ok(x as u64)
}

/// An optional integer field of an options table.
pub(super) fn opt_int(call: &str, o: &Option<LuaTable>, key: &str) -> LuaResult<Option<u64>> {
    match opt::<Value>(o, key)? {
        None | Some(Value::Nil) => Ok(None),
        Some(v) => int(call, key, &v).map(Some),
    }
}

/// A u32 from an integer argument.
pub(super) fn int_u32(call: &str, what: &str, v: &Value) -> LuaResult<u32> {
    let x = int(call, what, v)?;
    u32::try_from(x).map_err(|_| msg(call, format!("{what} {x} is too large")))
}

/// Refuses a Lua table used as an array that is not one: every key an integer 1 … n with no
/// hole (a `nil` in the middle would silently end `ipairs`-style reading there and drop the
/// rest). `what` names the array in the error.
pub(super) fn dense(call: &str, what: &str, t: &LuaTable) -> LuaResult<()> {
    let len = t.raw_len();
    let mut count = 0usize;
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        let ok = match k {
            Value::Integer(i) => i >= 1 && (i as usize) <= len,
            Value::Number(x) => x >= 1.0 && x.fract() == 0.0 && (x as usize) <= len,
            _ => false,
        };
        if !ok {
            let shown = match &k {
                Value::String(s) => format!("{:?}", s.to_string_lossy()),
                Value::Integer(i) => i.to_string(),
                Value::Number(x) => x.to_string(),
                other => format!("a {}", other.type_name()),
            };
            return Err(msg(
                call,
                format!(
                    "{what} is not an array: key {shown} (after {len} values, or a hole: a nil \
                     inside an array ends it early and the values after it would be lost)"
                ),
            ));
        }
        count += 1;
    }
    if count != len {
        return Err(msg(
            call,
            format!("{what} has a hole: {count} values under keys 1 … {len}"),
        ));
    }
    Ok(())
}

/// A Lua array of integers (0-based indices).
pub(super) fn int_list(call: &str, what: &str, t: &LuaTable) -> LuaResult<Vec<u32>> {
    dense(call, what, t)?;
    t.sequence_values::<Value>()
        .enumerate()
        .map(|(i, v)| {
            let v = v?;
            int_u32(call, what, &v).map_err(|_| {
                let (shown, why) = match &v {
                    Value::Integer(x) if *x < 0 => (x.to_string(), "is out of range"),
                    Value::Number(x) if *x < 0.0 => (x.to_string(), "is out of range"),
                    Value::Integer(x) => (x.to_string(), "is too large"),
                    Value::Number(x) => (x.to_string(), "is not an integer"),
                    other => (format!("a {}", other.type_name()), "is not an integer"),
                };
                msg(
                    call,
                    format!(
                        "{what} {shown} (position {}) {why}: indices are integers from 0",
                        i + 1
                    ),
                )
            })
        })
        .collect()
}

/// Little-endian uint32 rows from a binary string, checking the size.
pub(super) fn u32_rows(call: &str, b: &[u8], rows: usize, len: usize) -> LuaResult<Vec<u32>> {
    // Checked: rows × len × 4 wrapping to the string's length would accept it.
    if rows.checked_mul(len).and_then(|v| v.checked_mul(4)) != Some(b.len()) {
        return Err(msg(
            call,
            format!("{} bytes for {rows} rows of {len} uint32", b.len()),
        ));
    }
    Ok(b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// "scan", "gram" or "auto" (`default` when absent).
pub(super) fn parse_mode(call: &str, m: Option<&str>, default: Mode) -> LuaResult<Mode> {
    match m {
        None => Ok(default),
        Some(s) => s.parse().lua_ctx(call),
    }
}

/// "fp32" (the default) or "fp16".
pub(super) fn parse_precision(call: &str, p: Option<String>) -> LuaResult<Precision> {
    match p {
        None => Ok(Precision::Fp32),
        Some(s) => s.parse().lua_ctx(call),
    }
}

/// `starts` (a Lua array of indices) or, when nil, every index below `n`.
pub(super) fn starts_or_all(call: &str, starts: Option<LuaTable>, n: usize) -> LuaResult<Vec<u32>> {
    match starts {
        Some(s) => int_list(call, "start", &s),
        None => Ok((0..n as u32).collect()),
    }
}

/// Starts with their rows: a Lua array of indices (named `what` in errors) and a binary string
/// of little-endian uint32, one row of `len` entries per start. Returns (starts, rows, len).
pub(super) fn rows_of_starts(
    call: &str,
    what: &str,
    starts: &LuaTable,
    bytes: &LuaString,
    len: &Value,
) -> LuaResult<(Vec<u32>, Vec<u32>, usize)> {
    let starts = int_list(call, what, starts)?;
    let len = int(call, "len", len)? as usize;
    let rows = u32_rows(call, &bytes.as_bytes(), starts.len(), len)?;
    Ok((starts, rows, len))
}
