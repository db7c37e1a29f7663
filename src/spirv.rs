//! The compiled shaders and a minimal SPIR-V reflection. Every shader `build.rs` compiles is a
//! [`Shader`] constant here (its name and its SPIR-V in both storage precisions), declared once
//! in one list below; [`crate::device::Context::pipeline_for`] takes one, so the pipeline
//! cache is keyed by it and every error names it. The reflection: the byte size of a shader's
//! push-constant block, so every `#[repr(C)]` push struct is checked against the shader that
//! reads it ([`checked_push`]; a block 4 bytes short once silently lost a field in the user's C
//! wrapper), and the specialization-constant ids it declares ([`check_spec_constants`]).
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

/// Declares one `Shader` constant per compiled shader, and `ALL`, the list of them the tests
/// hold to the build's: a shader is named once, on its line of the list below.
macro_rules! shaders {
    ($($konst:ident = $name:literal,)*) => {
        $(
            pub(crate) const $konst: Shader = Shader {
                name: $name,
                fp32: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fp32.spv")),
                fp16: include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fp16.spv")),
            };
        )*
        /// Every shader `build.rs` compiles: the unit tests hold it to the build's own list and
        /// check every shader's errors against it.
        #[cfg(test)]
        pub(crate) const ALL: &[Shader] = &[$($konst),*];
    };
}

shaders! {
    SCAN = "scan",
    SCAN_TILE = "scan_tile",
    SCAN_COMMIT = "scan_commit",
    SCAN_INIT = "scan_init",
    GRAM_MATRIX = "gram_matrix",
    GRAM = "gram",
    GRAM_MATRIX_FIXED = "gram_matrix_fixed",
    GRAM_FIXED = "gram_fixed",
    SCAN_BIG = "scan_big",
    SCAN_BIG_TILE = "scan_big_tile",
    SCAN_BIG_COMMIT = "scan_big_commit",
    SCAN_FILTER = "scan_filter",
    SCAN_FILTER_TILE = "scan_filter_tile",
    SCAN_JUDGE = "scan_judge",
    SCAN_PREP = "scan_prep",
    SCAN_FTABLE = "scan_ftable",
    SCAN_FILTER_TC = "scan_filter_tc",
    SCAN_FILTER_TC_TILE = "scan_filter_tc_tile",
    SCAN_JUDGE_TC = "scan_judge_tc",
    SCAN_PREP_TC = "scan_prep_tc",
    SCAN_FTABLE_TC = "scan_ftable_tc",
    SCAN_FILTER_PROBE = "scan_filter_probe",
    SCAN_FILTER_PROBE_TC = "scan_filter_probe_tc",
    KNN_DIST = "knn_dist",
    KNN_SORT = "knn_sort",
    KNN_MERGE = "knn_merge",
    KNN_WARP = "knn_warp",
    IVFPQ_SCAN = "ivfpq_scan",
    IVFPQ_RERANK = "ivfpq_rerank",
    KNN_GATHER = "knn_gather",
    LOOP_PROBE = "loop_probe",
    IVF_SCAN = "ivf_scan",
    KMEANS_UPDATE = "kmeans_update",
}

impl Shader {
    /// The SPIR-V of this shader for tables stored at precision `p` (each shader is compiled once
    /// per storage precision; the arithmetic is fp32 in both).
    pub(crate) fn spirv(&self, p: Precision) -> &'static [u8] {
        match p {
            Precision::Fp32 => self.fp32,
            Precision::Fp16 => self.fp16,
        }
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

/// The words of a SPIR-V module (little-endian).
fn words(spirv: &[u8]) -> Vec<u32> {
    spirv
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Calls `f(opcode, words)` for each instruction after the module's 5-word header, in order
/// (`words` is the instruction's, its first word included); false where an instruction's word
/// count runs past the module or is 0 (it stops there).
fn each_instruction(words: &[u32], mut f: impl FnMut(u32, &[u32])) -> bool {
    let mut i = 5;
    while i < words.len() {
        let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
        if count == 0 || i + count > words.len() {
            return false;
        }
        f(op, &words[i..i + count]);
        i += count;
    }
    true
}

/// Size in bytes of the push-constant block declared by `spirv` (offset of the last member plus
/// its size), or `None` when the module declares none. Handles scalar and vector members.
pub(crate) fn push_constant_size(spirv: &[u8]) -> Option<u32> {
    let words = words(spirv);
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return None;
    }
    let mut sizes = std::collections::HashMap::new(); // type id -> byte size (scalars/vectors)
    let mut structs = std::collections::HashMap::new(); // struct id -> member type ids
    let mut pointers = std::collections::HashMap::new(); // pointer id -> (storage, pointee)
    let mut offsets = std::collections::HashMap::new(); // (struct, member) -> offset
    let mut push_ptr = None;
    let whole = each_instruction(&words, |op, w| {
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
    });
    if !whole {
        return None;
    }
    let (_, block) = pointers.get(&push_ptr?)?;
    let members = structs.get(block)?;
    let last = members.len().checked_sub(1)?;
    let off = offsets.get(&(*block, last as u32))?;
    Some(off + sizes.get(&members[last])?)
}

/// The specialization-constant ids `spirv` declares (`OpDecorate … SpecId n`, the workgroup
/// size's `local_size_x_id` included; a constant the shader does not use may be optimised away),
/// sorted. [`crate::device::Context::pipeline_for`] passes constant i as the i-th value of its list,
/// so it checks the list against these: a shader that gains a constant its host does not set
/// (it would silently keep its default) is an error, not a wrong result.
pub(crate) fn spec_constant_ids(spirv: &[u8]) -> Vec<u32> {
    let mut ids = Vec::new();
    each_instruction(&words(spirv), |op, w| {
        if op == OP_DECORATE && w.len() >= 4 && w[2] == DECORATION_SPEC_ID {
            ids.push(w[3]);
        }
    });
    ids.sort_unstable();
    ids
}

const OP_CAPABILITY: u32 = 17;
/// `ShaderClockKHR`: a module that reads the clock (a profiling knob built in, such as the
/// filter's `FILTER_CLOCK`).
pub(crate) const CAPABILITY_SHADER_CLOCK: u32 = 5055;

/// Whether `spirv` declares `OpCapability cap`.
pub(crate) fn has_capability(spirv: &[u8], cap: u32) -> bool {
    let mut found = false;
    each_instruction(&words(spirv), |op, w| {
        found |= op == OP_CAPABILITY && w.len() >= 2 && w[1] == cap;
    });
    found
}

/// Checks the values a pipeline of `shader` at precision `p` passes (constant i = `values[i]`)
/// against the ids that variant declares: every declared id must get a value. The error names
/// the shader.
pub(crate) fn check_spec_constants(shader: &Shader, p: Precision, values: &[u32]) -> Result<()> {
    let ids = spec_constant_ids(shader.spirv(p));
    if ids.iter().any(|&id| id as usize >= values.len()) {
        return Err(Error::Invalid(format!(
            "internal: {} declares specialization constants {ids:?}; the host passes {} \
             values (ids 0..{})",
            shader.name,
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
    fn capabilities() {
        assert!(!has_capability(b"not spir-v", 1));
        for s in ALL {
            // Capability Shader (1): every compute shader.
            assert!(
                has_capability(s.fp32, 1) && has_capability(s.fp16, 1),
                "{}",
                s.name
            );
        }
        // Only a profiling knob (FILTER_CLOCK, GF_PROFILE) makes a shader read the clock.
        if option_env!("DIVERSITY_SHADER_DEFINES").is_none_or(|d| d.trim().is_empty()) {
            for s in ALL {
                for spv in [s.fp32, s.fp16] {
                    assert!(!has_capability(spv, CAPABILITY_SHADER_CLOCK), "{}", s.name);
                }
            }
        }
    }

    #[test]
    fn spec_constants() {
        assert_eq!(spec_constant_ids(b"not spir-v"), Vec::<u32>::new());
        assert_eq!(spec_constant_ids(GRAM.fp32), (0..16).collect::<Vec<u32>>());
        assert_eq!(spec_constant_ids(KNN_SORT.fp16), vec![0, 1, 2]);
        // scan.comp does not read SEQ_LEN (id 3): the compiler drops its decoration.
        assert_eq!(spec_constant_ids(SCAN.fp32), vec![0, 1, 2, 4, 5]);
        let fp32 = Precision::Fp32;
        assert!(check_spec_constants(&SCAN, fp32, &[0; 6]).is_ok());
        assert_eq!(spec_constant_ids(KNN_DIST.fp32), Vec::<u32>::new());
        assert!(check_spec_constants(&GRAM, fp32, &[0; 16]).is_ok());
        assert!(check_spec_constants(&GRAM, fp32, &[0; 15]).is_err());
        assert!(check_spec_constants(&KNN_WARP, fp32, &[0; 3]).is_err());
        let e = check_spec_constants(&GRAM, Precision::Fp16, &[0; 7]).unwrap_err();
        assert!(e.to_string().contains("gram declares"), "{e}");
    }

    /// The list is the build's: `build.rs` writes the name of every shader it compiled (each
    /// `shaders/*.comp` and each variant) to `shaders.txt`, and [`ALL`] must hold exactly those,
    /// each once.
    #[test]
    fn every_compiled_shader_is_listed() {
        let compiled = include_str!(concat!(env!("OUT_DIR"), "/shaders.txt"));
        let mut built: Vec<&str> = compiled.lines().filter(|l| !l.is_empty()).collect();
        built.sort_unstable();
        let mut listed: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        listed.sort_unstable();
        assert_eq!(listed, built);
    }

    /// A pipeline whose specialization list is short is refused with the shader's name, for
    /// every shader that declares constants (the IVF, filter and judge shaders included), in
    /// both precisions.
    #[test]
    fn spec_constant_errors_name_the_shader() {
        let mut checked = Vec::new();
        for s in ALL {
            for p in [Precision::Fp32, Precision::Fp16] {
                if spec_constant_ids(s.spirv(p)).is_empty() {
                    assert!(check_spec_constants(s, p, &[]).is_ok(), "{}", s.name);
                    continue;
                }
                let e = check_spec_constants(s, p, &[]).unwrap_err().to_string();
                assert!(e.contains(&format!("{} declares", s.name)), "{e}");
                checked.push(s.name);
            }
        }
        for name in [
            "ivf_scan",
            "ivfpq_scan",
            "scan_filter",
            "scan_judge_tc",
            "knn_warp",
        ] {
            assert!(checked.contains(&name), "{name} declares no constants");
        }
    }
}
