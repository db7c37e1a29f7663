//! The driver's silent loop cap, measured: Mesa's llvmpipe (lavapipe) leaves every loop of an
//! invocation once 65,535 iterations have run in all, without an error. The device's
//! capabilities must say so exactly when the driver does it, since every planner (k-NN tiles,
//! gram steps per dispatch) sizes its dispatches from `Capabilities::loop_limit`.

mod common;
use common::{assert_clean, ctx};
use diversity::device::{check_loop_budget, loop_budget};
use diversity::limits::{loop_probe_hash, measure_loop_iterations};

#[test]
fn loop_cap_is_measured_and_reported() {
    let ctx = ctx();
    let caps = ctx.caps().clone();
    // Below any cap: the loop runs in full and the hash matches the host's.
    for n in [0u32, 1, 1000, 60_000] {
        let (count, hash) = measure_loop_iterations(&ctx, n).unwrap();
        assert_eq!(
            count, n,
            "{}: a loop of {n} iterations ran {count}",
            caps.name
        );
        assert_eq!(hash, loop_probe_hash(n));
    }
    let asked = 200_000u32;
    let (count, hash) = measure_loop_iterations(&ctx, asked).unwrap();
    eprintln!(
        "{}: a loop of {asked} iterations ran {count}; caps.loop_limit {:?}",
        caps.name, caps.loop_limit
    );
    match caps.loop_limit {
        Some(limit) => {
            assert!(
                (count as u64) < asked as u64 && (count as u64).abs_diff(limit) <= 1,
                "{}: capabilities say loops stop at {limit}, measured {count} of {asked}",
                caps.name
            );
            assert!(loop_budget(&caps) < limit);
            assert!(check_loop_budget(&caps, "a test dispatch", limit).is_err());
            let msg = check_loop_budget(&caps, "a test dispatch", limit)
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("a test dispatch") && msg.contains("loop"),
                "{msg}"
            );
        }
        None => {
            assert_eq!(
                count, asked,
                "{}: loops stop at {count} but the capabilities know no cap",
                caps.name
            );
            assert_eq!(hash, loop_probe_hash(asked));
        }
    }
    check_loop_budget(&caps, "a small dispatch", 1000).unwrap();
    assert_clean(&ctx);
}
