//! The compiled shaders and a minimal SPIR-V reflection: the byte size of a shader's push-constant
//! block, so every `#[repr(C)]` push struct is checked against the shader that reads it (a block
//! 4 bytes short once silently lost a field in the user's C wrapper).

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
    fn push_blocks_match_the_rust_structs() {
        use crate::scan::{CommitPush, InitPush, ScanPush, TilePush};
        let cases = [
            (SCAN, std::mem::size_of::<ScanPush>()),
            (SCAN_TILE, std::mem::size_of::<TilePush>()),
            (SCAN_COMMIT, std::mem::size_of::<CommitPush>()),
            (SCAN_INIT, std::mem::size_of::<InitPush>()),
        ];
        for (shader, size) in cases {
            assert_eq!(
                push_constant_size(shader.fp32),
                Some(size as u32),
                "{}",
                shader.name
            );
            assert_eq!(
                push_constant_size(shader.fp16),
                Some(size as u32),
                "{}",
                shader.name
            );
        }
        // The user's block: five u32 fields, tile_size the fifth.
        assert_eq!(std::mem::size_of::<ScanPush>(), 20);
        assert_eq!(push_constant_size(b"not spir-v"), None);
    }
}
