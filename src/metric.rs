//! The similarity or distance a k-NN or IVF search ranks by: `ip`, `cosine` or `l2`.
//! Vocabulary only: it parses and prints the name, gives the shaders' number for it, and may
//! touch nothing but [`crate::error`]; the k-NN engine, the IVF indexes, the float64 reference
//! and the caches all name it from here.

use crate::error::{Error, Result};

/// Similarity or distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// `q · e`, largest first.
    InnerProduct,
    /// `q · e / (|q| |e|)`, largest first; 0 against a zero row or for a zero query.
    Cosine,
    /// Squared Euclidean distance `|q - e|²`, smallest first.
    L2,
}

impl Metric {
    /// `ip`, `cosine` or `l2`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::InnerProduct => "ip",
            Metric::Cosine => "cosine",
            Metric::L2 => "l2",
        }
    }
    /// The metric's number in the k-NN and IVF shaders' push constants.
    pub(crate) fn code(self) -> u32 {
        match self {
            Metric::InnerProduct => 0,
            Metric::Cosine => 1,
            Metric::L2 => 2,
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ip" | "inner_product" | "dot" => Ok(Metric::InnerProduct),
            "cosine" | "cos" => Ok(Metric::Cosine),
            "l2" | "L2" => Ok(Metric::L2),
            _ => Err(Error::Invalid(format!(
                "metric '{s}': expected ip, cosine or l2"
            ))),
        }
    }
}
