//! Atomic file writes: [`PendingFile`], the temporary file every writer of the crate goes
//! through (the caches, the fp16 `.bin` and `.npy` files, the IVF index files), renamed into
//! place only when the whole file is written, so that a failed run never leaves a partial or
//! stale file behind; [`write_atomic`] for a file written in one go; [`check_output`], the
//! refusal of an output path that is not a regular file; and the I/O error helpers the writers
//! share. It may touch the file system and [`crate::error`], nothing else of the crate.

use crate::error::{Error, Result};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Stale temporary files removed so far by this process (see [`PendingFile`]).
pub fn stale_removed() -> u64 {
    STALE_REMOVED.load(Ordering::Relaxed)
}

static STALE_REMOVED: AtomicU64 = AtomicU64::new(0);

/// This host's name as it may appear in a file name (`-` and anything but letters, digits, `.`
/// and `_` replaced by `_`); `host` when unknown.
fn host_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(read_host_tag)
}

/// [`host_tag`], read once from `/proc/sys/kernel/hostname`.
fn read_host_tag() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let tag: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if tag.is_empty() {
        "host".into()
    } else {
        tag
    }
}

/// Remove the temporary files `.<name>.tmp-<host>-<pid>-<n>` in `dir` left by processes of this
/// host that no longer run (a pid with no `/proc/<pid>`). Files of other hosts (a shared file
/// system) and of running processes are left alone; where `/proc` is missing nothing is removed.
fn remove_stale(dir: &Path, name: &std::ffi::OsStr) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".{}.tmp-{}-", name.to_string_lossy(), host_tag());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let Some((pid, counter)) = rest.split_once('-') else {
            continue;
        };
        let (Ok(pid), true) = (
            pid.parse::<u32>(),
            !counter.is_empty() && counter.bytes().all(|b| b.is_ascii_digit()),
        ) else {
            continue;
        };
        if pid != me
            && !Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::remove_file(e.path()).is_ok()
        {
            STALE_REMOVED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A file being written: a temporary file `.<name>.tmp-<host>-<pid>-<counter>` beside its
/// destination, renamed onto the destination by [`commit`](PendingFile::commit) and removed when
/// dropped without a commit. A process killed outright (`kill -9`, the OOM killer) cannot remove
/// its temporary file: the next [`create`](PendingFile::create) for the same destination removes
/// those of processes of this host that no longer run ([`stale_removed`]).
///
/// Creating it is the check that the output location works — the directory exists and is
/// writable — so callers create it *before* any expensive work, and a failure at any later point
/// (an error, a panic, a killed job's unwinding) leaves neither a partial file nor a stale one
/// overwritten half-way: the destination is either untouched or replaced whole.
#[derive(Debug)]
pub struct PendingFile {
    tmp: PathBuf,
    out: PathBuf,
    done: bool,
}

impl PendingFile {
    /// Create the temporary file for `out` and return it with the open file to write into.
    ///
    /// Errors name `out` and the cause: [`Error::Io`] "output directory X does not exist" or
    /// "cannot write here: …" (e.g. permission denied), [`Error::Invalid`] when `out` has no file
    /// name or exists and is not a regular file (a directory, a device, a FIFO, a socket:
    /// [`check_output`]).
    pub fn create(out: &Path) -> Result<(PendingFile, File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = out.file_name().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: not a file path (it has no file name)",
                out.display()
            ))
        })?;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(Error::Io {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("output directory {} does not exist", dir.display()),
                ),
            });
        }
        check_output(out)?;
        remove_stale(&dir, name);
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".tmp-{}-{}-{}",
            host_tag(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::Io {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    e.kind(),
                    format!("cannot write here: {e} (creating {})", tmp.display()),
                ),
            })?;
        Ok((
            PendingFile {
                tmp,
                out: out.to_path_buf(),
                done: false,
            },
            file,
        ))
    }

    /// The destination path.
    pub fn path(&self) -> &Path {
        &self.out
    }

    /// The temporary file's path (beside the destination).
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// Rename the temporary file onto the destination, replacing any file there in one step.
    ///
    /// The caller flushes (and, for durability, `sync_all`s) its file first. The destination is
    /// checked again first ([`check_output`]): something that is not a regular
    /// file put there since [`create`](PendingFile::create) is refused, never renamed over. On
    /// error the temporary file is removed and the destination is untouched.
    pub fn commit(mut self) -> Result<()> {
        check_output(&self.out)?;
        std::fs::rename(&self.tmp, &self.out).map_err(|source| Error::Io {
            path: self.out.clone(),
            source,
        })?;
        self.done = true;
        // Make the rename itself durable where the platform allows it; best effort.
        #[cfg(unix)]
        if let Some(dir) = self.out.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.done {
            // Best effort: the error that matters is whatever stopped the write.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// An I/O error of `path`.
pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Refuse a writer (of the file named `what`) whose earlier I/O error may have left part of a
/// batch in its file: on `finish` the file "was not written", otherwise "start a new one".
pub(crate) fn check_not_failed(failed: bool, path: &Path, what: &str, finish: bool) -> Result<()> {
    if !failed {
        return Ok(());
    }
    let then = if finish {
        format!("the {what} was not written")
    } else {
        "start a new one".to_string()
    };
    Err(Error::Invalid(format!(
        "{}: the {what} writer failed earlier; {then}",
        path.display()
    )))
}

/// Write `bytes` to `path` through a [`PendingFile`] (a temporary file beside it, fsynced, then
/// renamed over it): on failure the temporary file is removed and the destination is untouched;
/// an existing `path` that is not a regular file is refused ([`check_output`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let (pending, mut f) = PendingFile::create(path)?;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    pending.commit()
}

/// What kind of file `path` names, following symlinks: `"file"` (a regular file),
/// `"directory"`, `"character device"`, `"block device"`, `"FIFO"`, `"socket"` or `"special
/// file"`; `None` when nothing is there (or it cannot be examined).
pub fn file_kind(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(path).ok()?.file_type();
    Some(if t.is_file() {
        "file"
    } else if t.is_dir() {
        "directory"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    })
}

/// Refuse an output path that exists and is not a regular file (a directory, a device such as
/// `/dev/null`, a FIFO, a socket; through a symlink too): replacing it by a rename would replace
/// the device or directory entry itself, and writing into it would block or go nowhere.
/// [`Error::Invalid`] "X: is a character device, not a regular file: refusing to write over it".
/// A path that does not exist, or names a regular file, passes. Every writer's
/// [`PendingFile`] asks this when it is created and again right before its rename.
pub fn check_output(path: &Path) -> Result<()> {
    match file_kind(path) {
        None | Some("file") => Ok(()),
        Some(kind) => Err(Error::Invalid(format!(
            "{}: is a {kind}, not a regular file: refusing to write over it",
            path.display()
        ))),
    }
}
