//! Device memory: [`Buffer`] (a buffer with its allocation, freed on drop) and the transfers
//! between host and device — uploads, downloads through one bounded staging buffer, and writes
//! of scattered regions. Every transfer is one or more [`Context::one_shot`] submissions.
//! It may touch the device context ([`crate::device`]) and [`crate::error`]; no engine.

use crate::device::Context;
use crate::error::{Error, Result, VkContext};
use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

/// Largest staging buffer of a download (larger downloads reuse it, round by round).
pub(crate) const STAGING_BYTES: u64 = 64 << 20;

/// A device buffer with its memory. Frees both on drop.
pub struct Buffer {
    ctx: Context,
    pub(crate) buffer: vk::Buffer,
    allocation: Option<Allocation>,
}

impl Buffer {
    /// A storage buffer of `size` bytes at `location`; `what` names it in errors.
    pub(crate) fn new(
        ctx: &Context,
        what: &'static str,
        size: u64,
        location: MemoryLocation,
        usage: vk::BufferUsageFlags,
    ) -> Result<Buffer> {
        let size = size.max(4);
        let dev = ctx.device();
        let buffer = unsafe {
            dev.create_buffer(
                &vk::BufferCreateInfo::default()
                    .size(size)
                    .usage(usage)
                    .sharing_mode(vk::SharingMode::EXCLUSIVE),
                None,
            )
        }
        .vk("vkCreateBuffer")?;
        crate::device::OpCounters::bump(&ctx.inner.ops.buffers);
        let requirements = unsafe { dev.get_buffer_memory_requirements(buffer) };
        let alloc = ctx.allocator().as_mut().map(|a| {
            a.allocate(&AllocationCreateDesc {
                name: what,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            })
        });
        let allocation = match alloc {
            Some(Ok(a)) => a,
            Some(Err(e)) => {
                unsafe { dev.destroy_buffer(buffer, None) };
                return Err(Error::Alloc {
                    what,
                    bytes: size,
                    reason: e.to_string(),
                });
            }
            None => unreachable!("allocator exists while the context lives"),
        };
        if let Err(e) =
            unsafe { dev.bind_buffer_memory(buffer, allocation.memory(), allocation.offset()) }
        {
            unsafe { dev.destroy_buffer(buffer, None) };
            if let Some(a) = ctx.allocator().as_mut() {
                let _ = a.free(allocation);
            }
            return Err(Error::Vulkan {
                call: "vkBindBufferMemory",
                result: e,
            });
        }
        Ok(Buffer {
            ctx: ctx.clone(),
            buffer,
            allocation: Some(allocation),
        })
    }

    /// A device-local storage buffer that can be copied to and from.
    pub(crate) fn storage(ctx: &Context, what: &'static str, size: u64) -> Result<Buffer> {
        Self::new(
            ctx,
            what,
            size,
            MemoryLocation::GpuOnly,
            vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::TRANSFER_SRC,
        )
    }

    /// A host-visible buffer the host writes and transfers read (an upload's source).
    pub(crate) fn host_upload(ctx: &Context, what: &'static str, size: u64) -> Result<Buffer> {
        Self::new(
            ctx,
            what,
            size,
            MemoryLocation::CpuToGpu,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )
    }

    /// A host-visible buffer transfers write and the host reads (a download's destination).
    pub(crate) fn host_download(ctx: &Context, what: &'static str, size: u64) -> Result<Buffer> {
        Self::new(
            ctx,
            what,
            size,
            MemoryLocation::GpuToCpu,
            vk::BufferUsageFlags::TRANSFER_DST,
        )
    }

    /// The mapped bytes of a host-visible buffer, to read.
    pub(crate) fn mapped_bytes(&self) -> &[u8] {
        self.allocation
            .as_ref()
            .and_then(|a| a.mapped_slice())
            .unwrap_or(&[])
    }

    /// The mapped bytes of a host-visible buffer.
    pub(crate) fn mapped(&mut self) -> &mut [u8] {
        self.allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .unwrap_or(&mut [])
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        unsafe { self.ctx.device().destroy_buffer(self.buffer, None) };
        if let Some(a) = self.allocation.take() {
            if let Some(al) = self.ctx.allocator().as_mut() {
                let _ = al.free(a);
            }
        }
    }
}

/// Host ↔ device transfers.
impl Context {
    /// A device-local storage buffer holding `bytes`, uploaded through a staging buffer.
    pub(crate) fn upload(&self, what: &'static str, bytes: &[u8]) -> Result<Buffer> {
        let dst = Buffer::storage(self, what, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(dst);
        }
        let mut staging = Buffer::new(
            self,
            "staging upload",
            bytes.len() as u64,
            MemoryLocation::CpuToGpu,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )?;
        staging.mapped()[..bytes.len()].copy_from_slice(bytes);
        let dev = self.device();
        self.one_shot(|cb| unsafe {
            dev.cmd_copy_buffer(
                cb,
                staging.buffer,
                dst.buffer,
                &[vk::BufferCopy::default().size(bytes.len() as u64)],
            );
        })?;
        Ok(dst)
    }

    /// Read `len` bytes at `offset` of `src` back to the host.
    pub(crate) fn download(&self, src: &Buffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.download_regions(src, &[(offset, len)])
    }

    /// Read several `(offset, len)` regions of `src` back to the host, their bytes concatenated
    /// in order: one submission per [`STAGING_BYTES`] through one staging buffer.
    pub(crate) fn download_regions(&self, src: &Buffer, regions: &[(u64, u64)]) -> Result<Vec<u8>> {
        let total: u64 = regions.iter().map(|r| r.1).sum();
        let mut out = vec![0u8; total as usize];
        self.download_regions_through(src, regions, STAGING_BYTES, &mut out)?;
        Ok(out)
    }

    /// [`download_regions`](Self::download_regions) into `out`, which holds exactly the regions'
    /// bytes: a caller reusing one host buffer pays no fresh pages for each download (a new
    /// allocation's first touch cost more than the copy on the GPU machine).
    pub(crate) fn download_regions_into(
        &self,
        src: &Buffer,
        regions: &[(u64, u64)],
        out: &mut [u8],
    ) -> Result<()> {
        self.download_regions_through(src, regions, STAGING_BYTES, out)
    }

    /// [`download_regions`](Self::download_regions) through a staging buffer of at most
    /// `staging` bytes (≥ 1).
    fn download_regions_through(
        &self,
        src: &Buffer,
        regions: &[(u64, u64)],
        staging: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let total: u64 = regions.iter().map(|r| r.1).sum();
        if total != out.len() as u64 {
            return Err(Error::Invalid(format!(
                "a download of {total} bytes into {} bytes",
                out.len()
            )));
        }
        if total == 0 {
            return Ok(());
        }
        // One staging buffer, filled and read back as many times as needed: a large download
        // (a k = N ranking is hundreds of MB) neither pins that much host memory at once nor
        // allocates and frees it whole on every call.
        let cap = total.min(staging.max(1));
        let mut staging = Buffer::new(
            self,
            "staging download",
            cap,
            MemoryLocation::GpuToCpu,
            vk::BufferUsageFlags::TRANSFER_DST,
        )?;
        let mut filled = 0usize;
        let mut pending = regions.iter().filter(|r| r.1 > 0).copied();
        let mut carry: Option<(u64, u64)> = None;
        let dev = self.device();
        loop {
            // Copies filling the staging buffer, splitting a region across rounds if needed.
            let mut copies = Vec::new();
            let mut at = 0;
            while at < cap {
                let Some((offset, len)) = carry.take().or_else(|| pending.next()) else {
                    break;
                };
                let n = len.min(cap - at);
                copies.push(
                    vk::BufferCopy::default()
                        .src_offset(offset)
                        .dst_offset(at)
                        .size(n),
                );
                at += n;
                if n < len {
                    carry = Some((offset + n, len - n));
                }
            }
            if copies.is_empty() {
                break;
            }
            self.one_shot(|cb| unsafe {
                transfer_barrier(dev, cb, true);
                dev.cmd_copy_buffer(cb, src.buffer, staging.buffer, &copies);
                memory_barrier(
                    dev,
                    cb,
                    (
                        vk::PipelineStageFlags::TRANSFER,
                        vk::AccessFlags::TRANSFER_WRITE,
                    ),
                    (vk::PipelineStageFlags::HOST, vk::AccessFlags::HOST_READ),
                );
            })?;
            out[filled..filled + at as usize].copy_from_slice(&staging.mapped()[..at as usize]);
            filled += at as usize;
        }
        Ok(())
    }

    /// Write `(offset, bytes)` regions into `dst` through one staging buffer and one submission,
    /// after everything submitted before.
    pub(crate) fn write_regions(&self, dst: &Buffer, regions: &[(u64, &[u8])]) -> Result<()> {
        let total: usize = regions.iter().map(|r| r.1.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let mut staging = Buffer::new(
            self,
            "staging upload",
            total as u64,
            MemoryLocation::CpuToGpu,
            vk::BufferUsageFlags::TRANSFER_SRC,
        )?;
        let mut copies = Vec::with_capacity(regions.len());
        let mut at = 0usize;
        {
            let map = staging.mapped();
            for &(offset, bytes) in regions.iter().filter(|r| !r.1.is_empty()) {
                map[at..at + bytes.len()].copy_from_slice(bytes);
                copies.push(
                    vk::BufferCopy::default()
                        .src_offset(at as u64)
                        .dst_offset(offset)
                        .size(bytes.len() as u64),
                );
                at += bytes.len();
            }
        }
        let dev = self.device();
        self.one_shot(|cb| unsafe {
            transfer_barrier(dev, cb, false);
            dev.cmd_copy_buffer(cb, staging.buffer, dst.buffer, &copies);
        })
    }
}

/// Shader work before → a transfer after: the transfer reads (download) or overwrites (upload)
/// what shaders wrote or read.
unsafe fn transfer_barrier(dev: &ash::Device, cb: vk::CommandBuffer, read: bool) {
    let dst = if read {
        vk::AccessFlags::TRANSFER_READ
    } else {
        vk::AccessFlags::TRANSFER_WRITE
    };
    memory_barrier(
        dev,
        cb,
        (
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::SHADER_READ,
        ),
        (vk::PipelineStageFlags::TRANSFER, dst),
    );
}

/// One global memory barrier: what the `src` (stages, accesses) did is made visible to the
/// `dst` (stages, accesses) after it. The transfers here and the barrier between dispatches
/// ([`crate::submit`]) record theirs with it.
pub(crate) unsafe fn memory_barrier(
    dev: &ash::Device,
    cb: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let barrier = [vk::MemoryBarrier::default()
        .src_access_mask(src.1)
        .dst_access_mask(dst.1)];
    dev.cmd_pipeline_barrier(
        cb,
        src.0,
        dst.0,
        vk::DependencyFlags::empty(),
        &barrier,
        &[],
        &[],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ContextOptions;

    /// Downloads through a staging buffer smaller than the data (regions split across rounds)
    /// return the same bytes as one round.
    #[test]
    fn download_in_rounds() {
        let ctx = Context::new(&ContextOptions::default()).expect("a Vulkan device");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let buf = ctx.upload("test data", &bytes).unwrap();
        let regions = [
            (0, 13),
            (100, 0),
            (17, 999),
            (5000, 4321),
            (9999, 1),
            (3, 2),
        ];
        let want: Vec<u8> = regions
            .iter()
            .flat_map(|&(o, l)| bytes[o as usize..(o + l) as usize].iter().copied())
            .collect();
        for staging in [1, 7, 64, 1000, 4321, 1 << 20] {
            let mut got = vec![0xAAu8; want.len()];
            ctx.download_regions_through(&buf, &regions, staging, &mut got)
                .unwrap();
            assert_eq!(got, want, "staging {staging}");
        }
        // A buffer of the wrong size is refused, not overrun.
        let mut short = vec![0u8; want.len() - 1];
        assert!(ctx
            .download_regions_into(&buf, &regions, &mut short)
            .is_err());
        assert!(ctx.download_regions(&buf, &[(0, 0)]).unwrap().is_empty());
    }
}
