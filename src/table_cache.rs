//! Device tables kept by content, for callers that hand the same table over and over.
//! It may touch [`Engine`] and what an engine is made of (device context, device table, host
//! table, errors); the C ABI is its caller.
//!
//! The old C wrapper re-initialises with the same table for every batch (`vkd_batch_init`) and
//! around every single sequence (`vkd_init` … `vkd_destroy`). A [`TableCache`] keeps the most
//! recent tables' [`Engine`]s (the device table and, once a gram job has built it, G) so that a
//! repeated init costs a comparison of the table's bytes instead of an upload and a G.
//!
//! A table is reused only when its shape, its storage precision and every byte of its values
//! equal a kept one's (compared in full, not by a checksum: nothing is trusted by a summary). At
//! most [`TableCache::capacity`] tables are kept, the least recently used dropped first; when an
//! upload or G runs out of device memory, every kept table no caller holds is dropped and the
//! call tried once more. Jobs and handles that hold an engine keep it alive after it leaves the
//! cache.

use crate::engine::{Engine, Target};
use crate::error::{Error, Result};
use crate::table::{Precision, Table};
use std::sync::{Arc, Mutex};

/// An engine shared by the cache and the handles made from it.
pub type SharedEngine = Arc<Mutex<Engine>>;

struct Entry {
    precision: Precision,
    table: Table,
    engine: SharedEngine,
    last_used: u64,
}

/// The tables (with their G) a context keeps; see the module docs.
pub struct TableCache {
    entries: Vec<Entry>,
    capacity: usize,
    clock: u64,
    hits: u64,
}

impl TableCache {
    /// A cache keeping at most `capacity` tables (0: keeps none, every call uploads).
    pub fn new(capacity: usize) -> TableCache {
        TableCache {
            entries: Vec::new(),
            capacity,
            clock: 0,
            hits: 0,
        }
    }

    /// How many tables it keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Tables kept now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it keeps no table.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Calls answered with a kept table so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Drop every kept table (handles made from them keep theirs alive).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The engine of `table` stored at `precision` on `target`: a kept one when a table with
    /// the same shape, precision and bytes was kept, else a new upload (kept in turn).
    pub fn engine(
        &mut self,
        target: &Target,
        table: Table,
        precision: Precision,
    ) -> Result<SharedEngine> {
        self.clock += 1;
        let now = self.clock;
        if let Some(e) = self.entries.iter_mut().find(|e| {
            e.precision == precision
                && e.table.n() == table.n()
                && e.table.d() == table.d()
                && same_bits(e.table.data(), table.data())
        }) {
            e.last_used = now;
            self.hits += 1;
            return Ok(e.engine.clone());
        }
        let upload = |t: &Table| target.upload(t, precision);
        let up = match upload(&table) {
            Err(e) if out_of_memory(&e) && self.drop_unused() > 0 => upload(&table)?,
            r => r?,
        };
        let engine = Arc::new(Mutex::new(up));
        if self.capacity > 0 {
            if self.entries.len() >= self.capacity {
                let oldest = (0..self.entries.len())
                    .min_by_key(|&i| self.entries[i].last_used)
                    .expect("a full cache is not empty");
                self.entries.swap_remove(oldest);
            }
            self.entries.push(Entry {
                precision,
                table,
                engine: engine.clone(),
                last_used: now,
            });
        }
        Ok(engine)
    }

    /// Drop the kept tables no handle holds (device memory is short); returns how many.
    pub fn drop_unused(&mut self) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| Arc::strong_count(&e.engine) > 1);
        before - self.entries.len()
    }
}

/// Whether `e` says device (or host) memory ran out, so that dropping kept tables may help.
pub fn out_of_memory(e: &Error) -> bool {
    use ash::vk::Result as R;
    match e {
        Error::Alloc { .. } => true,
        Error::Vulkan { result, .. } => {
            matches!(
                *result,
                R::ERROR_OUT_OF_DEVICE_MEMORY | R::ERROR_OUT_OF_HOST_MEMORY
            )
        }
        _ => false,
    }
}

/// Bitwise equality (so that −0.0 and 0.0, or two NaNs, are told apart as stored).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && bytemuck::cast_slice::<f32, u8>(a) == bytemuck::cast_slice::<f32, u8>(b)
}
