//! Argument helpers shared by the example programs (not an example itself).

use std::fmt::Display;
use std::str::FromStr;

/// A comma-separated list of values of a flag, each parsed with `FromStr` (`fp32,fp16`,
/// `block64,block128`, `256,512`): the first bad one is an error naming the flag and the value.
pub fn list<T: FromStr>(flag: &str, v: &str) -> Result<Vec<T>, String>
where
    T::Err: Display,
{
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|e| format!("{flag} {x}: {e}"))
        })
        .collect()
}
