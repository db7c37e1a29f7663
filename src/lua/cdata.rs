//! LuaJIT FFI cdata: what a cdata is (address, byte size, element type, read through a small Lua
//! helper), values read from it, rows written into it; the fp16 conversions of the compat shim.
//! The only `unsafe` of the binding lives here.

use super::args::{int, opt_int};
use super::error::msg;
use half::f16;
use mlua::prelude::*;
use mlua::Value;

/// What a cdata is, from the FFI helper: its address, its byte size when it is an array, and its
/// element type as LuaJIT prints it.
struct CData {
    address: usize,
    bytes: Option<usize>,
    elem: String,
}

const CDATA_HELPER: &str = r#"
local ffi = require "ffi"
return function(x)
  local t = tostring(ffi.typeof(x))
  local elem, kind = t:match("^ctype<(.-)%s*([%[%*&].*)>$")
  if not elem then return nil, nil, t end
  local addr = tonumber(ffi.cast("uintptr_t", x))
  local bytes = nil
  if kind:sub(1, 1) == "[" then bytes = ffi.sizeof(x) end
  return addr, bytes, elem
end
"#;

/// What `v` is, through the FFI helper (loaded once per Lua state); refused unless an array or a
/// pointer.
fn cdata_info(lua: &Lua, call: &str, v: Value) -> LuaResult<CData> {
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
    let (addr, bytes, elem): (Option<f64>, Option<f64>, String) = helper.call(v)?;
    let address = match addr {
        Some(a) => checked_address(call, a)?,
        None => {
            return Err(msg(
                call,
                format!("unsupported cdata type {elem}: pass an array or a pointer"),
            ))
        }
    };
    Ok(CData {
        address,
        bytes: bytes.map(|b| b as usize),
        elem: elem.replace("const ", "").trim().to_string(),
    })
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

/// Rows from a cdata array or pointer of float, double or fp16 bits: `n` rows of `dim` values
/// (both required), read from at most its size (arrays) or `o.count` elements (pointers).
pub(super) fn rows_from_cdata(
    lua: &Lua,
    call: &str,
    v: Value,
    n: Option<usize>,
    dim: Option<usize>,
    o: &Option<LuaTable>,
) -> LuaResult<(Vec<f32>, usize, usize)> {
    let cd = cdata_info(lua, call, v)?;
    let dtype = dtype_of(call, &cd.elem)?;
    let size = dtype.bytes();
    let d = dim.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
    let n = n.ok_or_else(|| msg(call, "a cdata needs {n = N, dim = D}"))?;
    let bytes = match (cd.bytes, opt_int(call, o, "count")?) {
        (Some(b), Some(c)) => b.min(c as usize * size),
        (Some(b), None) => b,
        (None, Some(c)) => c as usize * size,
        (None, None) => {
            return Err(msg(
                call,
                "a pointer cdata needs {count = elements} (its length)",
            ))
        }
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

/// Copy `data` to `address` (a cdata array of at least `data.len()` elements of `T`).
///
/// # Safety
/// `address` and the caller's size check come from one live cdata object of that many `T`.
pub(super) unsafe fn copy_to<T: Copy>(call: &str, address: f64, data: &[T]) -> LuaResult<()> {
    let ptr = checked_address(call, address)? as *mut T;
    // SAFETY: the caller's promise above.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
    Ok(())
}

/// `f32_to_f16`, `f16_to_f32` and `convert_f32_to_f16` (cdata to cdata).
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    // Scalar and bulk fp16 conversion (round-to-nearest-even), for the compat shim.
    m.set(
        "f32_to_f16",
        lua.create_function(|_, x: f32| Ok(f16::from_f32(x).to_bits()))?,
    )?;
    m.set(
        "f16_to_f32",
        lua.create_function(|_, b: u16| Ok(f16::from_bits(b).to_f32()))?,
    )?;
    m.set(
        "convert_f32_to_f16",
        lua.create_function(|lua, (src, dst, count): (Value, Value, Value)| {
            let call = "convert_f32_to_f16";
            let count = int(call, "count", &count)? as usize;
            let s = cdata_info(lua, call, src)?;
            let d = cdata_info(lua, call, dst)?;
            if s.elem != "float" || !matches!(d.elem.as_str(), "unsigned short" | "uint16_t") {
                return Err(msg(
                    call,
                    format!(
                        "expected float source and uint16_t destination, got {} and {}",
                        s.elem, d.elem
                    ),
                ));
            }
            if s.bytes.is_some_and(|b| b < count * 4) || d.bytes.is_some_and(|b| b < count * 2) {
                return Err(msg(call, format!("{count} values do not fit the buffers")));
            }
            let vals = values_from_memory(call, s.address, count * 4, &Dtype::F32, count)?;
            // SAFETY: the destination cdata holds at least count halves (checked for arrays; a
            // pointer's length is the caller's promise, as in C).
            let out = unsafe { std::slice::from_raw_parts_mut(d.address as *mut u16, count) };
            for (o, v) in out.iter_mut().zip(vals) {
                *o = f16::from_f32(v).to_bits();
            }
            Ok(())
        })?,
    )?;
    Ok(())
}
