//! Property tests: the command-line channel round-trips any value without a
//! newline, and the number parsers agree with their definitions.

use oxmpi_runtime::mca::{decode_cli, encode_cli, parse_int, parse_size};
use proptest::prelude::*;

proptest! {
    #[test]
    fn cli_round_trip(
        pairs in prop::collection::vec(("[a-z][a-z0-9_]{0,20}", "[^\n\r\0]{0,40}"), 0..6)
    ) {
        let text = encode_cli(&pairs).unwrap();
        let back = decode_cli(&text).unwrap();
        let got: Vec<(String, String)> =
            back.into_iter().map(|a| (a.name, a.value)).collect();
        prop_assert_eq!(got, pairs);
    }

    #[test]
    fn cli_rejects_any_newline(pre in "[^\n\r\0]{0,10}", post in "[^\n\r\0]{0,10}") {
        let value = format!("{pre}\n{post}");
        prop_assert!(encode_cli(&[("btl", value)]).is_err());
    }

    #[test]
    fn size_suffixes(n in 0u64..(1 << 33), suffix in 0usize..4, lower: bool) {
        let (letter, shift) = [("", 0), ("K", 10), ("M", 20), ("G", 30)][suffix];
        let letter = if lower { letter.to_ascii_lowercase() } else { letter.to_owned() };
        prop_assert_eq!(parse_size(&format!("{n}{letter}")), Ok(n << shift));
    }

    #[test]
    fn int_decimal_and_hex(i: i64) {
        prop_assert_eq!(parse_int(&i.to_string()), Ok(i));
        let hex = if i < 0 {
            format!("-0x{:x}", i.unsigned_abs())
        } else {
            format!("0x{i:x}")
        };
        prop_assert_eq!(parse_int(&hex), Ok(i));
    }

    #[test]
    fn parsers_never_panic(s in "\\PC{0,20}") {
        let _ = parse_size(&s);
        let _ = parse_int(&s);
    }
}
