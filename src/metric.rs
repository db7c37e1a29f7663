//! The similarity or distance a k-NN or IVF search ranks by: `ip`, `cosine` or `l2`.
//! Vocabulary only: it parses and prints the name, gives the shaders' number for it, and may
//! touch nothing but [`crate::error`] and `crate::names` (which writes the name and the
//! parse); the k-NN engine, the IVF indexes, the float64 reference
//! and the caches all name it from here.

use crate::names::named_enum;

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

named_enum!(Metric, "metric", {
    InnerProduct => "ip" | "inner_product" | "dot",
    Cosine => "cosine" | "cos",
    L2 => "l2" | "L2",
});

impl Metric {
    /// The metric's number in the k-NN and IVF shaders' push constants.
    pub(crate) fn code(self) -> u32 {
        match self {
            Metric::InnerProduct => 0,
            Metric::Cosine => 1,
            Metric::L2 => 2,
        }
    }
}
