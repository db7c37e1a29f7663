//! What an inverted-file index keeps on the device from one search call to the next, so that a
//! call costs its GPU work and little else: one submitter (a command buffer, its fence and its
//! timestamps), the queries' upload buffer (host-visible) and device copy, the results' device
//! buffer and read-back buffer (host-visible), the coarse k-NN's scratch
//! ([`crate::knn::KeptScratch`]) and the list scan's descriptor set. Buffers grow (to a power of
//! two) when a call needs more and are otherwise reused; the set is written again only when a
//! buffer it names was made again (or the lists' slab was rebuilt). A search then records, in
//! one command buffer and one submission: the copy of the queries, the coarse k-NN and the
//! packing of its probes, the list scan reading them, and the copy of the results into the
//! read-back buffer, read once after the one fence wait. May touch the device context, device
//! memory, command submission and the k-NN's kept scratch.

use crate::device::{Buffer, Context};
use crate::error::Result;
use crate::knn::KeptScratch;
use crate::submit::{Set, Submitter};
use ash::vk;

/// A buffer of at least some size, made again (larger) only when a call needs more.
struct Grown {
    what: &'static str,
    kind: Kind,
    buf: Option<Buffer>,
    bytes: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Device,
    Upload,
    Download,
}

impl Grown {
    fn new(what: &'static str, kind: Kind) -> Grown {
        Grown {
            what,
            kind,
            buf: None,
            bytes: 0,
        }
    }

    /// Makes sure the buffer holds `bytes`; whether it was made again.
    fn fit(&mut self, ctx: &Context, bytes: u64) -> Result<bool> {
        if self.buf.is_some() && bytes <= self.bytes {
            return Ok(false);
        }
        self.buf = None;
        let size = bytes.max(256).next_power_of_two();
        self.buf = Some(match self.kind {
            Kind::Device => Buffer::storage(ctx, self.what, size)?,
            Kind::Upload => Buffer::host_upload(ctx, self.what, size)?,
            Kind::Download => Buffer::host_download(ctx, self.what, size)?,
        });
        self.bytes = size;
        Ok(true)
    }

    fn buf(&self) -> &Buffer {
        self.buf.as_ref().expect("fitted before use")
    }
}

/// The device state a search keeps (see the [module](self) documentation).
pub(super) struct Resident {
    // The sets first: dropped before the buffers they name.
    /// The list scan's set, and what it was written for.
    set: Option<(Set, [u64; 3])>,
    /// IVF-PQ's re-rank's set, and what it was written for.
    rerank_set: Option<(Set, [u64; 3])>,
    /// The coarse k-NN's scratch (its set names `queries`).
    pub coarse: KeptScratch,
    ctx: Context,
    /// The one submitter, its mark between the coarse search and the list scan.
    pub sub: Submitter,
    up: Grown,
    queries: Grown,
    out: Grown,
    down: Grown,
    /// Bumped whenever `queries` or `out` is made again.
    gen: u64,
}

/// The buffers of one call, borrowed apart so the coarse scratch can be borrowed beside them.
pub(super) struct Io<'a> {
    pub sub: &'a mut Submitter,
    pub coarse: &'a mut KeptScratch,
    pub set: &'a mut Option<(Set, [u64; 3])>,
    pub rerank_set: &'a mut Option<(Set, [u64; 3])>,
    pub up: &'a Buffer,
    pub queries: &'a Buffer,
    pub out: &'a Buffer,
    pub down: &'a Buffer,
    pub gen: u64,
    pub ctx: &'a Context,
}

impl Resident {
    pub(super) fn new(ctx: &Context) -> Result<Resident> {
        Ok(Resident {
            ctx: ctx.clone(),
            sub: Submitter::with_mark(ctx)?,
            up: Grown::new("IVF queries upload", Kind::Upload),
            queries: Grown::new("IVF queries", Kind::Device),
            out: Grown::new("IVF results", Kind::Device),
            down: Grown::new("IVF results read-back", Kind::Download),
            gen: 0,
            coarse: KeptScratch::default(),
            set: None,
            rerank_set: None,
        })
    }

    /// Has `write` put `values` floats (the queries as the shaders read them) straight into the
    /// mapped upload buffer — no vector of their own on the way —, and makes sure the device's
    /// queries, the results (`out_bytes`) and the read-back (`down_bytes`) fit.
    pub(super) fn stage(
        &mut self,
        values: usize,
        write: impl FnOnce(&mut [f32]),
        out_bytes: u64,
        down_bytes: u64,
    ) -> Result<Io<'_>> {
        let ctx = &self.ctx;
        let bytes = values * 4;
        self.up.fit(ctx, bytes as u64)?;
        let mut again = self.queries.fit(ctx, bytes as u64)?;
        again |= self.out.fit(ctx, out_bytes)?;
        self.down.fit(ctx, down_bytes)?;
        if again {
            self.gen += 1;
        }
        let up = self.up.buf.as_mut().expect("fitted above");
        write(bytemuck::cast_slice_mut(&mut up.mapped()[..bytes]));
        Ok(Io {
            sub: &mut self.sub,
            coarse: &mut self.coarse,
            set: &mut self.set,
            rerank_set: &mut self.rerank_set,
            up: self.up.buf(),
            queries: self.queries.buf(),
            out: self.out.buf(),
            down: self.down.buf(),
            gen: self.gen,
            ctx: &self.ctx,
        })
    }
}

/// The list scan's set in `slot` naming `bindings`, written again only when `key` (the
/// generations of everything it names) changed since the last call.
pub(super) fn set_for(
    slot: &mut Option<(Set, [u64; 3])>,
    ctx: &Context,
    key: [u64; 3],
    bindings: &[(u32, &Buffer)],
) -> Result<vk::DescriptorSet> {
    if slot.as_ref().map(|s| s.1) != Some(key) {
        *slot = None;
        *slot = Some((Set::new(ctx, bindings, &[])?, key));
    }
    Ok(slot.as_ref().expect("made above").0.set)
}

/// Records the copy of `bytes` of the upload buffer into the device's queries.
///
/// # Safety
/// `cb` is recording.
pub(super) unsafe fn record_upload(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    up: &Buffer,
    queries: &Buffer,
    bytes: u64,
) {
    dev.cmd_copy_buffer(
        cb,
        up.buffer,
        queries.buffer,
        &[vk::BufferCopy::default().size(bytes)],
    );
}

/// Records, after the scan: copies of `(src, src offset, dst offset, bytes)` into the read-back
/// buffer `down`, made visible to the host.
///
/// # Safety
/// `cb` is recording.
pub(super) unsafe fn record_readback(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    down: &Buffer,
    copies: &[(&Buffer, u64, u64, u64)],
) {
    use vk::{AccessFlags as A, PipelineStageFlags as S};
    crate::memory::memory_barrier(
        dev,
        cb,
        (S::COMPUTE_SHADER, A::SHADER_WRITE | A::SHADER_READ),
        (S::TRANSFER, A::TRANSFER_READ | A::TRANSFER_WRITE),
    );
    for &(src, from, to, bytes) in copies {
        let region = vk::BufferCopy::default()
            .src_offset(from)
            .dst_offset(to)
            .size(bytes);
        dev.cmd_copy_buffer(cb, src.buffer, down.buffer, &[region]);
    }
    crate::memory::memory_barrier(
        dev,
        cb,
        (S::TRANSFER, A::TRANSFER_WRITE),
        (S::HOST, A::HOST_READ),
    );
}

/// `words` words of the read-back buffer from word `at`, read in place (the mapped memory is
/// the host's cached memory; no copy).
pub(super) fn words(down: &Buffer, at: usize, words: usize) -> &[u32] {
    bytemuck::cast_slice(&down.mapped_bytes()[at * 4..(at + words) * 4])
}
