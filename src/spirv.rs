//! The compiled shaders and a minimal SPIR-V reflection: the byte size of a shader's push-constant
//! block, so every `#[repr(C)]` push struct is checked against the shader that reads it (a block
//! 4 bytes short once silently lost a field in the user's C wrapper). [`spirv_for`] and
//! [`checked_push`] are what every engine calls to turn a shader into a pipeline key.

use crate::error::{Error, Result};
use crate::table::Precision;

/// A shader compiled by `build.rs`, in both storage precisions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shader {
    pub name: &'static str,
    pub fp32: &'static [u8],
    pub fp16: &'static [u8],
}

macro_rules! shader {
    ($name:literal) => {
        Shader {
            name: $name,
            fp32: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fp32.spv")),
            fp16: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fp16.spv")),
        }
    };
}

pub(crate) const SCAN: Shader = shader!("scan");
pub(crate) const SCAN_TILE: Shader = shader!("scan_tile");
pub(crate) const SCAN_COMMIT: Shader = shader!("scan_commit");
pub(crate) const SCAN_INIT: Shader = shader!("scan_init");
pub(crate) const GRAM_MATRIX: Shader = shader!("gram_matrix");
pub(crate) const GRAM: Shader = shader!("gram");
pub(crate) const SCAN_BIG: Shader = shader!("scan_big");
pub(crate) const SCAN_BIG_TILE: Shader = shader!("scan_big_tile");
pub(crate) const SCAN_BIG_COMMIT: Shader = shader!("scan_big_commit");
pub(crate) const KNN_DIST: Shader = shader!("knn_dist");
pub(crate) const KNN_SORT: Shader = shader!("knn_sort");
pub(crate) const KNN_MERGE: Shader = shader!("knn_merge");
pub(crate) const KNN_WARP: Shader = shader!("knn_warp");
pub(crate) const LOOP_PROBE: Shader = shader!("loop_probe");

/// The SPIR-V of `shader` for tables stored at precision `p` (each shader is compiled once per
/// storage precision; the arithmetic is fp32 in both).
pub(crate) fn spirv_for(shader: &Shader, p: Precision) -> &'static [u8] {
    match p {
        Precision::Fp32 => shader.fp32,
        Precision::Fp16 => shader.fp16,
    }
}

/// The byte size of push struct `T`, checked against the push-constant block that both
/// variants of `shader` declare: a mismatch is an internal error at pipeline creation, never a
/// field silently lost at dispatch.
pub(crate) fn checked_push<T>(shader: &Shader) -> Result<u32> {
    let want = std::mem::size_of::<T>() as u32;
    for spv in [shader.fp32, shader.fp16] {
        let got = push_constant_size(spv);
        if got != Some(want) {
            return Err(Error::Invalid(format!(
                "internal: push-constant block of {} is {got:?} bytes, the Rust struct {want}",
                shader.name
            )));
        }
    }
    Ok(want)
}

const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_VARIABLE: u32 = 59;
const OP_MEMBER_DECORATE: u32 = 72;
const DECORATION_OFFSET: u32 = 35;
const STORAGE_PUSH_CONSTANT: u32 = 9;

/// Size in bytes of the push-constant block declared by `spirv` (offset of the last member plus
/// its size), or `None` when the module declares none. Handles scalar and vector members.
pub(crate) fn push_constant_size(spirv: &[u8]) -> Option<u32> {
    let words: Vec<u32> = spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return None;
    }
    let mut sizes = std::collections::HashMap::new(); // type id -> byte size (scalars/vectors)
    let mut structs = std::collections::HashMap::new(); // struct id -> member type ids
    let mut pointers = std::collections::HashMap::new(); // pointer id -> (storage, pointee)
    let mut offsets = std::collections::HashMap::new(); // (struct, member) -> offset
    let mut push_ptr = None;
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return None;
        }
        let w = &words[i..i + count];
        match op {
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                sizes.insert(w[1], w[2] / 8);
            }
            OP_TYPE_VECTOR => {
                let s = *sizes.get(&w[2])?;
                sizes.insert(w[1], s * w[3]);
            }
            OP_TYPE_STRUCT => {
                structs.insert(w[1], w[2..].to_vec());
            }
            OP_TYPE_POINTER => {
                pointers.insert(w[1], (w[2], w[3]));
            }
            OP_MEMBER_DECORATE if w[3] == DECORATION_OFFSET => {
                offsets.insert((w[1], w[2]), w[4]);
            }
            OP_VARIABLE if w[3] == STORAGE_PUSH_CONSTANT => {
                push_ptr = Some(w[1]);
            }
            _ => {}
        }
        i += count;
    }
    let (_, block) = pointers.get(&push_ptr?)?;
    let members = structs.get(block)?;
    let last = members.len().checked_sub(1)?;
    let off = offsets.get(&(*block, last as u32))?;
    Some(off + sizes.get(&members[last])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_blocks() {
        // Every engine's push structs are checked at pipeline creation (`checked_push`); the
        // scan's are also pinned by a unit test in scan.rs. Here: the parser itself.
        assert_eq!(push_constant_size(b"not spir-v"), None);
        assert_eq!(push_constant_size(SCAN.fp32), Some(20));
        assert!(checked_push::<[u32; 5]>(&SCAN).is_ok());
        assert!(checked_push::<[u32; 4]>(&SCAN).is_err());
    }
}
