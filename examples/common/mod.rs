//! Argument helpers shared by the example programs (not an example itself).

use std::fmt::Display;
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

/// SPEC §Exactness 2 on every `(name, start, sequence)` of `items`, in parallel over the CPU
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
