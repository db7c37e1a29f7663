//! The corpus of saved crashes, the child process that replays it and then generated inputs,
//! and the parent test that runs the child and reports what it found.

use super::*;

// ---------------------------------------------------------------------------------------------
// The corpus of saved crashes.

fn case_text(case: &Case, iter: Option<u64>, how: &str) -> String {
    let mut t = format!("target={}\nmain={}\n", case.target.name(), case.main);
    if let Some(d) = case.dim {
        let _ = writeln!(t, "dim={d}");
    }
    let _ = writeln!(t, "expect={}", case.expect);
    if let Some(i) = iter {
        let _ = writeln!(t, "iter={i}\nseed={:#018x}", input_seed(i));
    }
    let _ = writeln!(t, "mutations={}", how.replace('\n', " "));
    t
}

/// Save a failing generated input under `failed` (the parent moves it to `tests/fuzz-corpus/`
/// at the end, so the corpus a run replays does not change under it); the directory's name.
fn save_failure(failed: &Path, case: &Case, iter: u64, how: &str) -> String {
    let name = format!("{}-i{iter}-{:016x}", case.target.name(), input_seed(iter));
    let dir = failed.join(&name);
    let _ = std::fs::create_dir_all(&dir);
    for (name, bytes) in &case.files {
        let _ = std::fs::write(dir.join(name), bytes);
    }
    let _ = std::fs::write(dir.join("case.txt"), case_text(case, Some(iter), how));
    name
}

/// The saved cases, sorted by directory name.
fn corpus() -> Vec<(String, Case)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(text) = std::fs::read_to_string(d.join("case.txt")) else {
            continue;
        };
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(str::to_string)
        };
        let target = get("target")
            .and_then(|t| Target::from_name(&t))
            .unwrap_or_else(|| panic!("{}: case.txt names no target", d.display()));
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&d)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "case.txt")
            .map(|n| {
                let b = std::fs::read(d.join(&n)).unwrap();
                (n, b)
            })
            .collect();
        files.sort();
        let case = Case {
            target,
            main: get("main").unwrap_or_else(|| files[0].0.clone()),
            files,
            dim: get("dim").and_then(|v| v.parse().ok()),
            expect: get("expect").as_deref() == Some("true"),
        };
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, case));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The child: replay the corpus, then generated inputs, from work item `start` on.

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    tried: u64,
    clean: u64,
    accepted: u64,
    crashes: u64,
}

fn parse_counts(line: &str) -> Option<Counts> {
    let mut c = Counts::default();
    for part in line.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "tried" => c.tried = v,
            "clean" => c.clean = v,
            "accepted" => c.accepted = v,
            "crashes" => c.crashes = v,
            _ => {}
        }
    }
    Some(c)
}

fn counts_line(c: &Counts) -> String {
    format!(
        "tried={} clean={} accepted={} crashes={}",
        c.tried, c.clean, c.accepted, c.crashes
    )
}

/// The child's loop; `work` is its directory (`current/` for the input under test,
/// `current.txt` saying which it is, `report.txt` for crashes and the final counts).
fn child(work: &Path, start: u64, iters: u64, only: Option<u64>, deadline: Option<u64>) {
    quiet_panics();
    let seeds = seeds(&work.join("seeds"));
    let corpus = corpus();
    let _ = std::fs::write(work.join("corpus-len"), corpus.len().to_string());
    let cur = work.join("current");
    let mut report = String::new();
    let mut counts = Counts::default();
    let items: Box<dyn Iterator<Item = u64>> = match only {
        Some(i) => Box::new(std::iter::once(corpus.len() as u64 + i)),
        None => Box::new(start..corpus.len() as u64 + iters),
    };
    for item in items {
        if item >= corpus.len() as u64
            && item % 1024 == 0
            && deadline.is_some_and(|d| unix_now() >= d)
        {
            let _ = writeln!(report, "STOPPED");
            break;
        }
        let (case, how, label, iter) = match corpus.get(item as usize) {
            Some((name, case)) => (case.clone(), String::new(), format!("corpus {name}"), None),
            None => {
                let iter = item - corpus.len() as u64;
                let (case, how) = generate(iter, &seeds);
                let label = format!("iteration {iter} (seed {:#018x})", input_seed(iter));
                (case, how, label, Some(iter))
            }
        };
        if only.is_some() {
            println!("{label}: {}", case_text(&case, iter, &how));
        }
        let _ = std::fs::write(
            work.join("current.txt"),
            format!(
                "item={item}\nlabel={label}\n{}counts={}\n",
                case_text(&case, iter, &how),
                counts_line(&counts)
            ),
        );
        counts.tried += 1;
        match run_case(&cur, &case) {
            Outcome::Clean => counts.clean += 1,
            Outcome::Accepted => counts.accepted += 1,
            Outcome::Crash(why) => {
                counts.crashes += 1;
                let saved = match iter {
                    Some(i) => format!(
                        "; saved to tests/fuzz-corpus/{}",
                        save_failure(&work.join("failed"), &case, i, &how)
                    ),
                    None => String::new(),
                };
                let _ = writeln!(
                    report,
                    "CRASH {label} target {}: {why}\n  mutations: {how}{saved}",
                    case.target.name()
                );
            }
        }
    }
    let _ = writeln!(report, "COUNTS {}", counts_line(&counts));
    std::fs::write(work.join("report.txt"), report).expect("write report");
}

/// The fuzzer's child process, not a test of its own: ignored in a plain run, started by the
/// parent with `--ignored --exact child::fuzz_child` and `DIVERSITY_FUZZ_CHILD` set.
#[test]
#[ignore = "started by fuzz_loaders as its child process"]
fn fuzz_child() {
    let Ok(work) = std::env::var("DIVERSITY_FUZZ_CHILD") else {
        return;
    };
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    child(
        Path::new(&work),
        num("DIVERSITY_FUZZ_START").unwrap_or(0),
        num("DIVERSITY_FUZZ_ITERS").unwrap_or(DEFAULT_ITERS),
        num("DIVERSITY_FUZZ_ONLY"),
        num("DIVERSITY_FUZZ_DEADLINE"),
    );
}

/// The fuzzer: children run the corpus and the generated inputs; an abort or hang is reported
/// with its input and the run goes on after it.
#[test]
fn fuzz_loaders() {
    if std::env::var("DIVERSITY_FUZZ_CHILD").is_ok() {
        return;
    }
    let asked = std::env::var("DIVERSITY_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let iters = asked.unwrap_or(DEFAULT_ITERS);
    let deadline = asked.is_none().then(|| unix_now() + CI_SECS);
    let mut stopped = false;
    let only = std::env::var("DIVERSITY_FUZZ_ONLY").ok();
    // Every input is written to a file: in memory (/dev/shm) where there is one.
    let name = format!("diversity-fuzz-{}", std::process::id());
    let work = [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .into_iter()
        .map(|d| d.join(&name))
        .find(|w| {
            let _ = std::fs::remove_dir_all(w);
            std::fs::create_dir_all(w).is_ok()
        })
        .expect("a temporary directory for the fuzzer");
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut total = Counts::default();
    let mut failures = Vec::new();
    let mut start = 0u64;
    loop {
        let _ = std::fs::remove_file(work.join("report.txt"));
        let _ = std::fs::remove_file(work.join("current.txt"));
        let mut cmd = Command::new(&exe);
        cmd.args([
            "child::fuzz_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DIVERSITY_FUZZ_CHILD", &work)
        .env("DIVERSITY_FUZZ_START", start.to_string())
        .env("DIVERSITY_FUZZ_ITERS", iters.to_string())
        .stdout(if only.is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
        if let Some(o) = &only {
            cmd.env("DIVERSITY_FUZZ_ONLY", o);
        }
        if let Some(d) = deadline {
            cmd.env("DIVERSITY_FUZZ_DEADLINE", d.to_string());
        }
        let mut child = cmd.spawn().expect("start the fuzz child");
        // Poll: the child is hung when one input has taken HANG_SECS.
        let mut hung = false;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            let stale = std::fs::metadata(work.join("current.txt"))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|e| e > Duration::from_secs(HANG_SECS));
            if stale {
                hung = true;
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        if let Ok(report) = std::fs::read_to_string(work.join("report.txt")) {
            for line in report.lines() {
                if let Some(c) = line.strip_prefix("COUNTS ").and_then(parse_counts) {
                    total.tried += c.tried;
                    total.clean += c.clean;
                    total.accepted += c.accepted;
                    total.crashes += c.crashes;
                } else if line == "STOPPED" {
                    stopped = true;
                } else if line.starts_with("CRASH") {
                    failures.push(line.to_string());
                } else if let Some(last) = failures.last_mut() {
                    last.push('\n');
                    last.push_str(line);
                }
            }
            break;
        }
        // The child died (abort, stack overflow, a refused allocation) or hung on the input in
        // current.txt: report and save it, then go on after it.
        let cur = std::fs::read_to_string(work.join("current.txt")).unwrap_or_default();
        let get = |k: &str| {
            cur.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        let item: u64 = get("item").parse().unwrap_or_else(|_| {
            panic!("the fuzz child failed before its first input ({status}): {stderr}")
        });
        if let Some(c) = parse_counts(&get("counts")) {
            total.tried += c.tried + 1;
            total.clean += c.clean;
            total.accepted += c.accepted;
            total.crashes += c.crashes + 1;
        }
        let mut saved = String::new();
        if let Ok(iter) = get("iter").parse::<u64>() {
            let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(work.join("current"))
                .map(|r| {
                    r.filter_map(|e| e.ok())
                        .map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            (n, std::fs::read(e.path()).unwrap_or_default())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let case = Case {
                target: Target::from_name(&get("target")).unwrap(),
                files,
                main: get("main"),
                dim: get("dim").parse().ok(),
                expect: get("expect") == "true",
            };
            saved = format!(
                "; saved to tests/fuzz-corpus/{}",
                save_failure(&work.join("failed"), &case, iter, &get("mutations"))
            );
        }
        let cause = if hung {
            format!("hung for more than {HANG_SECS} s")
        } else {
            format!(
                "the process died ({status}): {}",
                stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            )
        };
        failures.push(format!(
            "CRASH {} target {}: {cause}\n  mutations: {}{saved}",
            get("label"),
            get("target"),
            get("mutations")
        ));
        if only.is_some() {
            break;
        }
        start = item + 1;
    }
    // The failing inputs join the corpus, replayed by every later run.
    if let Ok(dirs) = std::fs::read_dir(work.join("failed")) {
        let _ = std::fs::create_dir_all(corpus_dir());
        for d in dirs.filter_map(|e| e.ok()) {
            let to = corpus_dir().join(d.file_name());
            let _ = std::fs::remove_dir_all(&to);
            let _ = std::fs::create_dir_all(&to);
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let _ = std::fs::copy(f.path(), to.join(f.file_name()));
            }
        }
    }
    let replayed = if only.is_some() {
        0
    } else {
        corpus_len_of(&work)
    };
    let _ = std::fs::remove_dir_all(&work);
    let secs = started.elapsed().as_secs_f64();
    // Straight to stdout, past the test harness's capture: CI shows the counts of a passing run.
    use std::io::Write as _;
    let mut out = std::io::stdout();
    let _ = writeln!(
        out,
        "fuzz: {} inputs tried ({} replayed from tests/fuzz-corpus, {} generated{}), {} \
         clean errors, {} accepted, {} crashes, {secs:.1} s",
        total.tried,
        replayed,
        total.tried.saturating_sub(replayed as u64),
        if stopped {
            format!(" of {iters}: stopped at the {CI_SECS} s limit")
        } else {
            String::new()
        },
        total.clean,
        total.accepted,
        total.crashes
    );
    for f in &failures {
        let _ = writeln!(out, "{f}");
    }
    assert!(
        failures.is_empty() && total.crashes == 0,
        "{} crashes (above); rerun one with DIVERSITY_FUZZ_ONLY=<iteration>",
        failures.len().max(total.crashes as usize)
    );
}

/// How many corpus entries the children replayed (written by the first child).
fn corpus_len_of(work: &Path) -> usize {
    std::fs::read_to_string(work.join("corpus-len"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}
