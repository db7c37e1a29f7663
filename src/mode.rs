//! The engine choice every front end names: `scan`, `gram` or `auto`. Vocabulary only: it
//! parses and prints the name and may touch nothing but [`crate::error`] and `crate::names`
//! (which writes the name and the parse); the `auto` rule itself is [`crate::gram::mode_for`].

use crate::names::named_enum;

/// Which engine computes the sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every step scans every candidate (O(N · D) per step).
    Scan,
    /// Keep `c · e_x` and add Gram rows (O(N) per step; needs about N² × 4 bytes for G,
    /// [`crate::gram::gram_bytes`]).
    Gram,
    /// Gram when it fits the device's memory budget, else scan ([`crate::gram::mode_for`]).
    Auto,
}

named_enum!(Mode, "mode", {
    Scan => "scan",
    Gram => "gram",
    Auto => "auto",
});

impl Mode {
    /// The `auto` rule, the one every engine and front end applies: `auto` is
    /// [`Mode::Gram`] where G fits (`gram_fits`: on the device's memory budget, or the host
    /// engine's), else [`Mode::Scan`]; a named mode is returned as it is (a requested gram that
    /// does not fit stays gram, and its job says why).
    pub fn resolve(self, gram_fits: bool) -> Mode {
        match self {
            Mode::Auto if gram_fits => Mode::Gram,
            Mode::Auto => Mode::Scan,
            m => m,
        }
    }
}
