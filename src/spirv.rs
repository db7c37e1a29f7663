//! The compiled shaders and a minimal SPIR-V reflection: the byte size of a shader's push-constant
//! block, so every `#[repr(C)]` push struct is checked against the shader that reads it (a block
//! 4 bytes short once silently lost a field in the user's C wrapper). [`spirv_for`] and
//! [`checked_push`] are what every engine calls to turn a shader into a pipeline key.
//! It may touch [`crate::error`] and the storage precision (which variant to pick); nothing
//! on a device.

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
pub(crate) const SCAN_FILTER: Shader = shader!("scan_filter");
pub(crate) const SCAN_FILTER_TILE: Shader = shader!("scan_filter_tile");
pub(crate) const SCAN_JUDGE: Shader = shader!("scan_judge");
pub(crate) const SCAN_PREP: Shader = shader!("scan_prep");
pub(crate) const SCAN_FTABLE: Shader = shader!("scan_ftable");
pub(crate) const SCAN_FILTER_TC: Shader = shader!("scan_filter_tc");
pub(crate) const SCAN_FILTER_TC_TILE: Shader = shader!("scan_filter_tc_tile");
pub(crate) const SCAN_JUDGE_TC: Shader = shader!("scan_judge_tc");
pub(crate) const SCAN_PREP_TC: Shader = shader!("scan_prep_tc");
pub(crate) const SCAN_FTABLE_TC: Shader = shader!("scan_ftable_tc");
pub(crate) const SCAN_FILTER_PROBE: Shader = shader!("scan_filter_probe");
pub(crate) const SCAN_FILTER_PROBE_TC: Shader = shader!("scan_filter_probe_tc");
pub(crate) const KNN_DIST: Shader = shader!("knn_dist");
pub(crate) const KNN_SORT: Shader = shader!("knn_sort");
pub(crate) const KNN_MERGE: Shader = shader!("knn_merge");
pub(crate) const KNN_WARP: Shader = shader!("knn_warp");
pub(crate) const IVFPQ_SCAN: Shader = shader!("ivfpq_scan");
pub(crate) const KNN_GATHER: Shader = shader!("knn_gather");
pub(crate) const LOOP_PROBE: Shader = shader!("loop_probe");
pub(crate) const IVF_SCAN: Shader = shader!("ivf_scan");
pub(crate) const KMEANS_UPDATE: Shader = shader!("kmeans_update");

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
const OP_DECORATE: u32 = 71;
const DECORATION_SPEC_ID: u32 = 1;
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
            // Vectors of a sized component (a vector of bools has no size and is skipped).
            OP_TYPE_VECTOR => {
                if let Some(&s) = sizes.get(&w[2]) {
                    sizes.insert(w[1], s * w[3]);
                }
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

/// Every shader, for naming a module in an error.
const ALL: [Shader; 14] = [
    SCAN,
    SCAN_TILE,
    SCAN_COMMIT,
    SCAN_INIT,
    GRAM_MATRIX,
    GRAM,
    SCAN_BIG,
    SCAN_BIG_TILE,
    SCAN_BIG_COMMIT,
    KNN_DIST,
    KNN_SORT,
    KNN_MERGE,
    KNN_WARP,
    LOOP_PROBE,
];

/// The name of the shader whose SPIR-V `spirv` is (either precision), or `"a shader"`.
pub(crate) fn shader_name(spirv: &[u8]) -> &'static str {
    ALL.iter()
        .find(|s| s.fp32 == spirv || s.fp16 == spirv)
        .map_or("a shader", |s| s.name)
}

/// The specialization-constant ids `spirv` declares (`OpDecorate … SpecId n`, the workgroup
/// size's `local_size_x_id` included; a constant the shader does not use may be optimised away),
/// sorted. [`crate::device::Context::pipeline`] passes constant i as the i-th value of its list,
/// so it checks the list against these: a shader that gains a constant its host does not set
/// (it would silently keep its default) is an error, not a wrong result.
pub(crate) fn spec_constant_ids(spirv: &[u8]) -> Vec<u32> {
    let words: Vec<u32> = spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut ids = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
        if count == 0 || i + count > words.len() {
            break;
        }
        if op == OP_DECORATE && count >= 4 && words[i + 2] == DECORATION_SPEC_ID {
            ids.push(words[i + 3]);
        }
        i += count;
    }
    ids.sort_unstable();
    ids
}

/// Checks the values a pipeline passes (constant i = `values[i]`) against the ids the shader
/// declares: every declared id must get a value.
pub(crate) fn check_spec_constants(name: &str, spirv: &[u8], values: &[u32]) -> Result<()> {
    let ids = spec_constant_ids(spirv);
    if ids.iter().any(|&id| id as usize >= values.len()) {
        return Err(Error::Invalid(format!(
            "internal: {name} declares specialization constants {ids:?}; the host passes {} \
             values (ids 0..{})",
            values.len(),
            values.len()
        )));
    }
    Ok(())
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

    #[test]
    fn spec_constants() {
        assert_eq!(spec_constant_ids(b"not spir-v"), Vec::<u32>::new());
        assert_eq!(spec_constant_ids(GRAM.fp32), (0..13).collect::<Vec<u32>>());
        assert_eq!(spec_constant_ids(KNN_SORT.fp16), vec![0, 1, 2]);
        // scan.comp does not read SEQ_LEN (id 3): the compiler drops its decoration.
        assert_eq!(spec_constant_ids(SCAN.fp32), vec![0, 1, 2, 4, 5]);
        assert!(check_spec_constants("scan", SCAN.fp32, &[0; 6]).is_ok());
        assert_eq!(spec_constant_ids(KNN_DIST.fp32), Vec::<u32>::new());
        assert!(check_spec_constants("gram", GRAM.fp32, &[0; 13]).is_ok());
        assert!(check_spec_constants("gram", GRAM.fp32, &[0; 12]).is_err());
        assert!(check_spec_constants("knn_warp", KNN_WARP.fp32, &[0; 3]).is_err());
        let e = check_spec_constants(shader_name(GRAM.fp16), GRAM.fp16, &[0; 7]).unwrap_err();
        assert!(e.to_string().contains("gram declares"), "{e}");
    }
}
