//! The push constants of the scan's shaders, one `#[repr(C)]` struct a block, laid out as the
//! shaders declare them (a unit test checks the sizes against the compiled shaders). Shared by
//! the pipelines (`state.rs`) and the recorder (`record.rs`); depends on nothing and may touch
//! nothing.

/// Push constants of `scan.comp` (untiled and in-shader tiles): the user's five fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ScanPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// First step of the dispatch (≥ 1; step 0 is the start).
    pub start_slot: u32,
    /// Steps in the dispatch.
    pub slot_count: u32,
    /// Candidates per tile; 0 = untiled.
    pub tile_size: u32,
}

/// Push constants of `scan_tile.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TilePush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// The step being computed.
    pub slot: u32,
    /// First candidate of the tile.
    pub tile_begin: u32,
    /// One past the last candidate of the tile.
    pub tile_end: u32,
}

/// Push constants of `scan_commit.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CommitPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// The step being committed.
    pub slot: u32,
}

/// Push constants of `scan_init.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct InitPush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
}

/// Push constants of `scan_ftable.comp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FTablePush {
    /// N.
    pub num_items: u32,
    /// D.
    pub dim: u32,
    /// Rows to write: N rounded up to whole filter blocks.
    pub rows: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spirv::{self, push_constant_size};

    /// Every push struct of the scan matches the block its shaders declare, in both precisions
    /// and both kernels.
    #[test]
    fn push_blocks_match_the_rust_structs() {
        let size = std::mem::size_of::<ScanPush>();
        let cases = [
            (spirv::SCAN, size),
            (spirv::SCAN_BIG, size),
            (spirv::SCAN_TILE, std::mem::size_of::<TilePush>()),
            (spirv::SCAN_BIG_TILE, std::mem::size_of::<TilePush>()),
            (spirv::SCAN_COMMIT, std::mem::size_of::<CommitPush>()),
            (spirv::SCAN_BIG_COMMIT, std::mem::size_of::<CommitPush>()),
            (spirv::SCAN_INIT, std::mem::size_of::<InitPush>()),
        ];
        for (shader, size) in cases {
            for spv in [shader.fp32, shader.fp16] {
                assert_eq!(
                    push_constant_size(spv),
                    Some(size as u32),
                    "{}",
                    shader.name
                );
            }
        }
        // The user's block: five u32 fields, tile_size the fifth.
        assert_eq!(size, 20);
    }
}
