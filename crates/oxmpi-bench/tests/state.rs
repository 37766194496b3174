//! `oxmpi-bench state`: the probe `compare` takes before every run, on its
//! own (what `oxmpi-bench paired` waits on).

use std::process::Command;

#[test]
fn state_prints_the_half_round_trip_and_its_band() {
    let out = Command::new(env!("CARGO_BIN_EXE_oxmpi-bench"))
        .arg("state")
        .output()
        .expect("oxmpi-bench runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let f: Vec<&str> = text.trim().split(',').collect();
    assert_eq!(f.len(), 5, "{text}");
    assert_eq!((f[0], f[1], f[3]), ("cacheline", "64", "us"), "{text}");
    let us: f64 = f[2].parse().expect("a number");
    assert!(us > 0.0 && us < 1000.0, "{text}");
    let band = |us: f64| {
        if us < 0.035 {
            "below 35 ns"
        } else if us <= 0.15 {
            "35 to 150 ns"
        } else {
            "above 150 ns"
        }
    };
    // The band is decided on the measured value, printed rounded to 0.1 ns:
    // at a boundary (0.0350 printed for 0.03498) either side is right.
    let near = [band(us - 0.00005), band(us + 0.00005)];
    assert!(near.contains(&f[4]), "{text}");
}
