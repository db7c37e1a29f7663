//! The push blocks of the k-NN shaders (`knn_dist`, `knn_warp`, `knn_sort`, `knn_merge`,
//! `knn_gather`), each checked against its shader where its pipeline is made, and [`Side`], the
//! scratch buffer pair the shaders' `dst` / `flip` / `from_b` codes name. Plain data: the
//! recorders and the scratch buffers both read it; it touches nothing else.

/// Which scratch buffer pair a row is in (the shaders' `dst` / `flip` / `from_b` codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// Keys A (binding 3), ids A (binding 4).
    A = 0,
    /// Keys B (binding 5), ids B (binding 6).
    B = 1,
}

impl Side {
    /// The other buffer pair.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// `knn_dist.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct DistPush {
    pub dim: u32,
    pub q0: u32,
    pub t0: u32,
    pub cols: u32,
    pub off: u32,
    pub pad_to: u32,
    pub stride: u32,
    /// 0: A, 1: B, 2: A's keys only.
    pub dst: u32,
    pub metric: u32,
    pub qn: u32,
}

/// `knn_warp.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct WarpPush {
    pub dim: u32,
    pub q0: u32,
    pub qn: u32,
    pub t0: u32,
    pub cols: u32,
    pub first: u32,
    pub stride: u32,
    pub metric: u32,
    pub fused: u32,
    pub a_stride: u32,
}

/// `knn_sort.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct SortPush {
    pub len: u32,
    pub src_stride: u32,
    pub dst_stride: u32,
    pub keep: u32,
    /// 0: A → B, 1: B → A.
    pub flip: u32,
}

/// `knn_merge.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct MergePush {
    pub stride: u32,
    pub len: u32,
    pub width: u32,
    /// 1: B → A, 0: A → B.
    pub from_b: u32,
}

/// `knn_gather.comp`'s push block.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GatherPush {
    pub stride: u32,
    pub ke: u32,
    pub qn: u32,
    pub from_b: u32,
}
