//! The engine choice every front end names: `scan`, `gram` or `auto`. Vocabulary only: it
//! parses and prints the name and may touch nothing but [`crate::error`]; the `auto` rule itself
//! is [`crate::gram::mode_for`].

use crate::error::{Error, Result};

/// Which engine computes the sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every step scans every candidate (O(N · D) per step).
    Scan,
    /// Keep `c · e_x` and add Gram rows (O(N) per step; needs N² × 4 bytes for G).
    Gram,
    /// Gram when it fits the device's memory budget, else scan ([`crate::gram::mode_for`]).
    Auto,
}

impl Mode {
    /// `scan`, `gram` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Scan => "scan",
            Mode::Gram => "gram",
            Mode::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "scan" => Ok(Mode::Scan),
            "gram" => Ok(Mode::Gram),
            "auto" => Ok(Mode::Auto),
            _ => Err(Error::Invalid(format!(
                "mode '{s}': expected scan, gram or auto"
            ))),
        }
    }
}
