//! LuaJIT FFI cdata: what a cdata is (address, byte size, element type, read through a small Lua
//! helper), values read from it, rows written into it; the fp16 conversions of the compat shim.
//! The only `unsafe` of the binding lives here. May touch raw memory the caller's cdata names
//! (checked for size) and the binding's helpers.

use super::args::{int, opt_int};
use super::error::msg;
use super::set_function;
use half::f16;
use mlua::prelude::*;
use mlua::Value;

/// What a cdata array is, from the FFI helper: its address, its byte size (`ffi.sizeof`) and its
/// element type as LuaJIT prints it. Only arrays are accepted: a pointer's size cannot be known.
struct CData {
    address: usize,
    bytes: usize,
    elem: String,
}

const CDATA_HELPER: &str = r#"
local ffi = require "ffi"
return function(x)
  if type(x) ~= "cdata" then return nil, nil, type(x), "none" end
  local t = tostring(ffi.typeof(x))
  local elem, kind = t:match("^ctype<(.-)%s*([%[%*&].*)>$")
  if not elem then return nil, nil, t, "other" end
  if kind:sub(1, 1) ~= "[" then return nil, nil, t, "pointer" end
  local bytes = ffi.sizeof(x)
  if not bytes then return nil, nil, t, "pointer" end
  return tonumber(ffi.cast("uintptr_t", x)), bytes, elem, "array"
end
"#;

/// What `v` (the argument `what`) is, through the FFI helper (loaded once per Lua state);
/// refused unless a cdata array whose size `ffi.sizeof` knows.
fn cdata_info(lua: &Lua, call: &str, what: &str, v: Value) -> LuaResult<CData> {
    let helper: LuaFunction =
        match lua.named_registry_value::<Option<LuaFunction>>("diversity.cdata")? {
            Some(f) => f,
            None => {
                let f: LuaFunction = lua
                    .load(CDATA_HELPER)
                    .set_name("=diversity.cdata")
                    .call(())?;
                lua.set_named_registry_value("diversity.cdata", f.clone())?;
                f
            }
        };
    let (addr, bytes, elem, kind): (Option<f64>, Option<f64>, String, String) = helper.call(v)?;
    match (kind.as_str(), addr, bytes) {
        ("array", Some(a), Some(b)) => Ok(CData {
            address: checked_address(call, a)?,
            bytes: b as usize,
            elem: elem.replace("const ", "").trim().to_string(),
        }),
        ("none", ..) => Err(msg(
            call,
            format!("{what} must be a cdata array (e.g. ffi.new(\"float[?]\", n)), got a {elem}"),
        )),
        ("pointer", ..) => Err(msg(
            call,
            format!(
                "{what} is a pointer cdata ({elem}) whose size cannot be known: pass an array \
                 cdata (ffi.new(\"T[?]\", n)), a string or a table"
            ),
        )),
        _ => Err(msg(
            call,
            format!("{what}: unsupported cdata type {elem}: pass an array cdata"),
        )),
    }
}

/// An element type of table data.
pub(super) enum Dtype {
    F32,
    F16,
    F64,
}

impl Dtype {
    /// Bytes per element.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 => 2,
            Dtype::F64 => 8,
        }
    }
}

/// The element type of a cdata of `elem`: float, double or 16-bit (fp16 bits).
fn dtype_of(call: &str, elem: &str) -> LuaResult<Dtype> {
    match elem {
        "float" => Ok(Dtype::F32),
        "double" => Ok(Dtype::F64),
        "unsigned short" | "uint16_t" | "short" | "int16_t" => Ok(Dtype::F16),
        _ => Err(msg(
            call,
            format!("cdata of {elem}: expected float, double or uint16_t (fp16 bits)"),
        )),
    }
}

/// Values from raw memory: `count` elements of `dtype` at `address` (checked against `bytes`).
pub(super) fn values_from_memory(
    call: &str,
    address: usize,
    bytes: usize,
    dtype: &Dtype,
    count: usize,
) -> LuaResult<Vec<f32>> {
    let size = dtype.bytes();
    let need = count
        .checked_mul(size)
        .ok_or_else(|| msg(call, "size overflows"))?;
    if bytes < need {
        return Err(msg(
            call,
            format!("the buffer holds {bytes} bytes but N × D = {count} values need {need}: it is smaller than N × D"),
        ));
    }
    // SAFETY: address and bytes describe one live cdata object (taken from it by the FFI helper or
    // given by the caller as pointer + length); we read `need` <= `bytes` of it, unaligned.
    let raw = unsafe { std::slice::from_raw_parts(address as *const u8, need) };
    Ok(match dtype {
        Dtype::F32 => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F64 => raw
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
            .collect(),
        Dtype::F16 => raw
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
    })
}

/// Rows from a cdata array of float, double or fp16 bits: `n` rows of `dim` values (both
/// required), read from at most its `ffi.sizeof` (and `o.count` elements when given); a pointer
/// cdata is refused, its size cannot be known.
pub(super) fn rows_from_cdata(
    lua: &Lua,
    call: &str,
    v: Value,
    n: Option<usize>,
    dim: Option<usize>,
    o: &Option<LuaTable>,
) -> LuaResult<(Vec<f32>, usize, usize)> {
    let cd = cdata_info(lua, call, "the data", v)?;
    let dtype = dtype_of(call, &cd.elem)?;
    let size = dtype.bytes();
    let d = dim.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
    let n = n.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
    // `count` may only narrow what ffi.sizeof reports, never widen it.
    let bytes = match opt_int(call, o, "count")? {
        Some(c) => (c as usize)
            .checked_mul(size)
            .ok_or_else(|| msg(call, "count overflows"))?
            .min(cd.bytes),
        None => cd.bytes,
    };
    let count = n
        .checked_mul(d)
        .ok_or_else(|| msg(call, "N × D overflows"))?;
    Ok((
        values_from_memory(call, cd.address, bytes, &dtype, count)?,
        n,
        d,
    ))
}

/// An address taken from a cdata by the Lua side, checked to be a plausible pointer.
fn checked_address(call: &str, a: f64) -> LuaResult<usize> {
    if !(a >= 1.0 && a.fract() == 0.0 && a < 9.007_199_254_740_992e15) {
        return Err(msg(call, format!("invalid address {a}")));
    }
    Ok(a as usize)
}

/// Copy `data` into the cdata array `dst` (the argument `what`), which must hold at least its
/// bytes (by `ffi.sizeof`) and have elements of one of the type names `elems`. Returns the
/// number of elements copied.
pub(super) fn copy_to_cdata<T: bytemuck::Pod>(
    lua: &Lua,
    call: &str,
    what: &str,
    elems: &[&str],
    dst: Value,
    data: &[T],
) -> LuaResult<usize> {
    let cd = cdata_info(lua, call, what, dst)?;
    if !elems.contains(&cd.elem.as_str()) {
        return Err(msg(
            call,
            format!(
                "{what} must be a {}[?] cdata, got one of {}",
                elems[0], cd.elem
            ),
        ));
    }
    let bytes: &[u8] = bytemuck::cast_slice(data);
    if cd.bytes < bytes.len() {
        return Err(msg(
            call,
            format!(
                "the {what} buffer of {} bytes is smaller than the {} bytes of {} entries",
                cd.bytes,
                bytes.len(),
                data.len()
            ),
        ));
    }
    // SAFETY: address and size come from one live cdata array (ffi.sizeof, checked above to hold
    // all of `bytes`); the copy is bytewise, so alignment does not matter.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), cd.address as *mut u8, bytes.len()) };
    Ok(data.len())
}

/// The bits of a half: an integer 0..65535, refused otherwise (a fraction or a value out of
/// range would otherwise be cut to some other half's bits).
fn f16_bits(v: &Value) -> LuaResult<u16> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Number(x) => *x,
        _ => f64::NAN,
    };
    if x.fract() == 0.0 && (0.0..=65535.0).contains(&x) {
        return Ok(x as u16);
    }
    let shown = match v {
        Value::Integer(i) => i.to_string(),
        Value::Number(x) => x.to_string(),
        other => format!("a {}", other.type_name()),
    };
    Err(msg(
        "f16_to_f32",
        format!("bits must be an integer 0..65535, got {shown}"),
    ))
}

/// `f32_to_f16`, `f16_to_f32` and `convert_f32_to_f16` (cdata to cdata).
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // Scalar and bulk fp16 conversion (round-to-nearest-even), for the compat shim.
    set_function(lua, m, "f32_to_f16", |_, x: f32| {
        Ok(f16::from_f32(x).to_bits())
    })?;
    set_function(lua, m, "f16_to_f32", |_, b: Value| {
        Ok(f16::from_bits(f16_bits(&b)?).to_f32())
    })?;
    set_function(
        lua,
        m,
        "convert_f32_to_f16",
        |lua, (src, dst, count): (Value, Value, Value)| {
            let call = "convert_f32_to_f16";
            let count = int(call, "count", &count)? as usize;
            let s = cdata_info(lua, call, "src", src)?;
            let d = cdata_info(lua, call, "dst", dst)?;
            if s.elem != "float" || !matches!(d.elem.as_str(), "unsigned short" | "uint16_t") {
                return Err(msg(
                    call,
                    format!(
                        "expected float source and uint16_t destination, got {} and {}",
                        s.elem, d.elem
                    ),
                ));
            }
            let (sb, db) = (count.checked_mul(4), count.checked_mul(2));
            if sb.is_none_or(|b| b > s.bytes) || db.is_none_or(|b| b > d.bytes) {
                return Err(msg(
                    call,
                    format!(
                        "{count} values do not fit the buffers (src {} bytes, dst {} bytes)",
                        s.bytes, d.bytes
                    ),
                ));
            }
            let vals = values_from_memory(call, s.address, count * 4, &Dtype::F32, count)?;
            // SAFETY: the destination is a live cdata array of at least count halves (its
            // ffi.sizeof, checked above).
            let out = unsafe { std::slice::from_raw_parts_mut(d.address as *mut u16, count) };
            for (o, v) in out.iter_mut().zip(vals) {
                *o = f16::from_f32(v).to_bits();
            }
            Ok(())
        },
    )?;
    Ok(())
}
