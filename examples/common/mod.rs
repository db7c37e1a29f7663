//! Argument helpers shared by the example programs (not an example itself).

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// An example's command line, read with `lexopt`: [`Cli::flag`] gives each flag as `--name`
/// (`--name=value` too) and answers `--help`/`-h` itself, printing the usage block of the
/// example's doc comment (its ```` ```text ```` block) and exiting 0; [`Cli::value`] gives the
/// flag's value. What the example refuses while parsing goes through [`parsed`]: exit status 2.
#[allow(dead_code)]
pub struct Cli {
    parser: lexopt::Parser,
    usage: String,
}

#[allow(dead_code)]
impl Cli {
    /// `source` is the example's own text (`include_str!("NAME.rs")`), whose doc comment holds
    /// the usage.
    pub fn new(source: &str) -> Cli {
        Cli {
            parser: lexopt::Parser::from_env(),
            usage: usage(source),
        }
    }

    /// The next flag (`--name`, or an unexpected `-x` / positional word as it was written, for
    /// the caller's "unknown argument"), None at the end. `--help` prints the usage and exits 0.
    pub fn flag(&mut self) -> Result<Option<String>, String> {
        use lexopt::Arg;
        let arg = match self.parser.next().map_err(|e| e.to_string())? {
            None => return Ok(None),
            Some(Arg::Long("help")) | Some(Arg::Short('h')) => {
                println!("{}", self.usage);
                std::process::exit(0);
            }
            Some(Arg::Long(name)) => format!("--{name}"),
            Some(Arg::Short(c)) => format!("-{c}"),
            Some(Arg::Value(v)) => v.to_string_lossy().into_owned(),
        };
        Ok(Some(arg))
    }

    /// The value of the flag just read (attached with `=` or the next word); None when there
    /// is none or it is not UTF-8.
    pub fn value(&mut self) -> Option<String> {
        self.parser.value().ok()?.into_string().ok()
    }
}

/// The usage text of an example: the ```` ```text ```` block of its `//!` doc comment.
fn usage(source: &str) -> String {
    let mut first = true;
    source
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```text")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| match l.strip_prefix("cargo run --release --example ") {
            Some(rest) => {
                let head = if first { "usage: " } else { "       " };
                first = false;
                format!("{head}{}", rest.replacen(" -- ", " ", 1))
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `parsed` of an example's argument parsing: the arguments, or the error on stderr (with a
/// pointer to `--help`) and exit status 2, as command-line tools do for usage errors.
#[allow(dead_code)]
pub fn parsed<A>(name: &str, r: Result<A, String>) -> A {
    r.unwrap_or_else(|e| {
        eprintln!("{name}: {e}\n({name} --help lists the options)");
        std::process::exit(2);
    })
}

/// A comma-separated list of values of a flag, each parsed with `FromStr` (`fp32,fp16`,
/// `block64,block128`, `256,512`): the first bad one is an error naming the flag and the value.
#[allow(dead_code)]
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

/// A comma-separated list of switches of a flag (`1,0`; also `yes`/`no`, `true`/`false`): the
/// first bad one is an error naming the flag and the value.
#[allow(dead_code)]
pub fn switches(flag: &str, v: &str) -> Result<Vec<bool>, String> {
    v.split(',')
        .map(|x| match x {
            "1" | "yes" | "true" => Ok(true),
            "0" | "no" | "false" => Ok(false),
            _ => Err(format!("{flag} {x}: expected 1 or 0")),
        })
        .collect()
}

/// The oracle's account of many sequences (see [`check_all`]).
#[allow(dead_code)]
pub struct OracleReport {
    /// Sequences checked.
    pub sequences: usize,
    /// Steps checked, over all sequences.
    pub steps: usize,
    /// The largest excess over all steps.
    pub worst: f64,
    /// Near-tie picks, over all sequences.
    pub ties: usize,
    /// The violations, as `"<name>: <violation>"`.
    pub violations: Vec<String>,
}

/// The ε-argmax oracle ([`diversity::reference::check_sequence`]) on every `(name, start,
/// sequence)` of `items`, in parallel over the CPU
/// cores. A worker that panics is an error naming the first item of its part (never a silently
/// shorter result), and so is checking nothing at all: a checker must be able to fail.
#[allow(dead_code)]
pub fn check_all(
    stored: &diversity::Table,
    items: &[(String, u32, Vec<u32>)],
    eps: f64,
) -> Result<OracleReport, String> {
    use diversity::reference::check_sequence;
    if items.is_empty() {
        return Err("nothing to check: no sequences".into());
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let parts: Vec<_> = items.chunks(items.len().div_ceil(threads).max(1)).collect();
    let results = std::thread::scope(|sc| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                sc.spawn(move || {
                    part.iter()
                        .map(|(_, s, seq)| check_sequence(stored, *s, seq, eps))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(items.len());
        for (h, part) in handles.into_iter().zip(&parts) {
            match h.join() {
                Ok(r) => all.extend(r),
                Err(p) => {
                    let why = p
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("a panic");
                    return Err(format!(
                        "the check of sequence {} (one of {} in a worker thread) failed: {why}",
                        part[0].0,
                        part.len()
                    ));
                }
            }
        }
        Ok(all)
    })?;
    let mut r = OracleReport {
        sequences: 0,
        steps: 0,
        worst: 0.0,
        ties: 0,
        violations: Vec::new(),
    };
    for ((name, _, _), c) in items.iter().zip(results) {
        match c {
            Ok(c) => {
                r.sequences += 1;
                r.steps += c.steps;
                r.worst = r.worst.max(c.worst_excess);
                r.ties += c.near_ties;
            }
            Err(v) => r.violations.push(format!("{name}: {v:?}")),
        }
    }
    if r.violations.is_empty() && r.steps == 0 {
        return Err(format!(
            "nothing checked: {} sequence(s) with no steps",
            r.sequences
        ));
    }
    Ok(r)
}

/// The files a table argument reads: the table itself and, for an fp16 `.bin`, its `.json`
/// sidecar, each labelled with `flag` (for [`check_outputs`]).
#[allow(dead_code)]
pub fn table_inputs(flag: &str, table: &Path) -> Vec<(String, PathBuf)> {
    let mut v = vec![(flag.to_string(), table.to_path_buf())];
    if table.extension().is_some_and(|e| e == "bin") {
        v.push((
            format!("{flag}'s sidecar"),
            diversity::files::fp16_bin_sidecar(table),
        ));
    }
    v
}

/// Check a program's outputs before any device work, every (flag, path) of `outputs`: one that
/// exists and is not a regular file (a device such as `/dev/null`, a FIFO, a socket, a
/// directory) is refused, so is one that is the same file as an input under any name
/// (`diversity::files::same_file`: device and inode, or the resolved path), and so are two
/// outputs that are one file. The error names the flags and the path: "--out X is also an input
/// (--table): refusing to overwrite it".
#[allow(dead_code)]
pub fn check_outputs(
    outputs: &[(String, PathBuf)],
    inputs: &[(String, PathBuf)],
) -> Result<(), String> {
    use diversity::files::{check_output, same_file};
    for (k, (flag, out)) in outputs.iter().enumerate() {
        if let Some((what, _)) = inputs.iter().find(|(_, i)| same_file(out, i)) {
            return Err(format!(
                "{flag} {} is also an input ({what}): refusing to overwrite it",
                out.display()
            ));
        }
        if let Some((other, _)) = outputs[..k].iter().find(|(_, o)| same_file(out, o)) {
            return Err(format!(
                "{flag} {} is also {other}: refusing to write one file twice",
                out.display()
            ));
        }
        check_output(out).map_err(|e| format!("{flag} {e}"))?;
    }
    Ok(())
}

/// `(flag, path)` for each output flag that was given.
#[allow(dead_code)]
pub fn given<P: AsRef<Path>>(flags: &[(&str, Option<P>)]) -> Vec<(String, PathBuf)> {
    flags
        .iter()
        .filter_map(|(f, p)| {
            p.as_ref()
                .map(|p| (f.to_string(), p.as_ref().to_path_buf()))
        })
        .collect()
}

/// Write an output file whole or not at all (`diversity::files::write_atomic`: a temporary file
/// beside it, renamed over it; one that is not a regular file is refused); the error names it.
#[allow(dead_code)]
pub fn write_out(path: &str, bytes: impl AsRef<[u8]>) -> Result<(), String> {
    diversity::files::write_atomic(Path::new(path), bytes.as_ref()).map_err(|e| e.to_string())
}

/// The integer value `v` of `flag`, at least `min` (the smallest that means anything for the
/// flag): a malformed, negative, fractional or smaller value is refused naming the flag and the
/// value (`--batch 0: must be at least 1`), never clamped into range.
#[allow(dead_code)]
pub fn int_min<T>(flag: &str, v: &str, min: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display,
{
    let x: T = v
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {v}: not an integer of at least {min}"))?;
    if x < min {
        return Err(format!("{flag} {v}: must be at least {min}"));
    }
    Ok(x)
}

/// [`int_min`] of a flag's value that may be missing (`None`: "`flag` needs a value").
#[allow(dead_code)]
pub fn int_arg<T>(flag: &str, v: Option<String>, min: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display,
{
    int_min(
        flag,
        &v.ok_or_else(|| format!("{flag} needs a value"))?,
        min,
    )
}

/// A comma-separated list of integers of a flag, each at least `min` ([`int_min`]).
#[allow(dead_code)]
pub fn int_list<T>(flag: &str, v: &str, min: T) -> Result<Vec<T>, String>
where
    T: FromStr + PartialOrd + Display + Copy,
{
    v.split(',').map(|x| int_min(flag, x, min)).collect()
}

/// The number `v` of `flag`: finite and above zero (`positive`) or at least zero; NaN, ±∞,
/// and negative or zero values where they mean nothing are refused naming the flag.
#[allow(dead_code)]
pub fn number(flag: &str, v: &str, positive: bool) -> Result<f64, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {v}: not a number"))?;
    let want = if positive { "above 0" } else { "0 or more" };
    if !x.is_finite() || x < 0.0 || (positive && x == 0.0) {
        return Err(format!("{flag} {v}: must be a finite number {want}"));
    }
    Ok(x)
}
