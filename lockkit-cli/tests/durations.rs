//! Every duration flag of every subcommand refuses a bad value as a bad command line (exit 2,
//! a message naming the flag), never with a panic (exit 101).

mod common;

use common::*;

/// Each subcommand's duration flags, as `(args before the flag, flag, args after the value)`.
const FLAGS: &[(&[&str], &str, &[&str])] = &[
    (&["exec", "x"], "--wait", &["--", "true"]),
    (&["exec", "x"], "--lease", &["--", "true"]),
    (&["exec", "x"], "--fixed-lease", &["--", "true"]),
    (&["exec", "x"], "--kill-after", &["--", "true"]),
    (&["top", "p"], "--interval", &[]),
    (&["bench", "--ops", "1"], "--hold", &[]),
];

/// Out of range (as seconds and with units), negative, not a number, malformed.
const BAD: &[&str] = &[
    "1e30",
    "18446744073709551616",
    "inf",
    "500000000y",
    "366days",
    "-1",
    "-1s",
    "-0",
    "NaN",
    "abc",
    "",
    "1s 2",
];

fn check(args: &[&str], flag: &str, value: &str) {
    let o = run(lockkit("mem://", args), LIMIT);
    let (_, err) = text(&o);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert_eq!(code(&o), 2, "{args:?}: {err}");
    let wanted = format!("invalid value '{value}' for '{flag} <");
    assert!(
        err.contains(&wanted),
        "{args:?}: wanted {wanted:?} in {err}"
    );
}

#[test]
fn bad_duration_values_are_usage_errors_on_every_flag() {
    for (before, flag, after) in FLAGS {
        for value in BAD {
            let mut args = before.to_vec();
            args.extend([*flag, value]);
            args.extend_from_slice(after);
            check(&args, flag, value);
            // `--flag=VALUE` takes the same way.
            let joined = format!("{flag}={value}");
            let mut args = before.to_vec();
            args.push(&joined);
            args.extend_from_slice(after);
            check(&args, flag, value);
        }
    }
}

/// Each flag's own range: a lease below lockkit's shortest (100ms), an interval below 100ms.
#[test]
fn out_of_a_flags_range_is_a_usage_error() {
    for (before, flag, after, value) in [
        (&["exec", "x"][..], "--lease", &["--", "true"][..], "50ms"),
        (&["exec", "x"], "--fixed-lease", &["--", "true"], "0"),
        (&["top", "p"], "--interval", &[], "50ms"),
    ] {
        let mut args = before.to_vec();
        args.extend([flag, value]);
        args.extend_from_slice(after);
        check(&args, flag, value);
        let (_, err) = text(&run(lockkit("mem://", &args), LIMIT));
        assert!(err.contains("too short"), "{args:?}: {err}");
    }
}

/// The bounds themselves are accepted.
#[test]
fn edge_values_are_accepted() {
    let o = run(
        lockkit(
            "mem://",
            &[
                "exec",
                "x",
                "--wait",
                "365days",
                "--fixed-lease",
                "100ms",
                "--kill-after",
                "0",
                "--",
                "true",
            ],
        ),
        LIMIT,
    );
    assert_eq!(code(&o), 0, "{:?}", text(&o));
    let o = run(
        lockkit(
            "mem://",
            &["exec", "x", "--wait", "0", "--lease", "1e2", "--", "true"],
        ),
        LIMIT,
    );
    assert_eq!(code(&o), 0, "{:?}", text(&o));
}
