//! The names of the crate's vocabulary enums (mode, metric, precision, scan kernel and shape, gram
//! placement), written once: [`named_enum!`] gives an enum its `name` and its `FromStr` from one
//! table of variants and spellings. It touches nothing but [`crate::error`].

/// `"a, b or c"`: the names a parse accepts, for its error message.
pub(crate) fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Give a fieldless enum `name(self) -> &'static str` and `std::str::FromStr` from one table.
/// Each row is `Variant => "name" | "other spelling" …`: `name` returns the first spelling, the
/// parse accepts all of them, and anything else is `Error::Invalid("<what> '<s>': expected
/// <the first spellings, as a, b or c>")`.
macro_rules! named_enum {
    (
        $ty:ident,
        $what:literal,
        { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }
    ) => {
        impl $ty {
            /// The name (the first spelling its `FromStr` accepts).
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::error::Result<Self> {
                match s {
                    $($name $(| $alias)* => Ok($ty::$variant),)+
                    _ => Err($crate::error::Error::Invalid(format!(
                        "{} '{s}': expected {}",
                        $what,
                        $crate::names::one_of(&[$($name),+])
                    ))),
                }
            }
        }
    };
}
pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    use super::one_of;

    #[test]
    fn lists_with_commas_and_or() {
        assert_eq!(one_of(&["fp32"]), "fp32");
        assert_eq!(one_of(&["fp32", "fp16"]), "fp32 or fp16");
        assert_eq!(one_of(&["a", "b", "c"]), "a, b or c");
    }
}
