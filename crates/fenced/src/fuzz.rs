//! Property tests (proptest) of every parser that user input or a server reply reaches: names,
//! lease lengths, URLs in messages, owner and fencing tokens, and script replies of any shape.
//! Each must answer, never panic, and accept exactly what its rules say.

use std::time::Duration;

use proptest::prelude::*;
use redis::Value;

use crate::kind::{abandon_reply, acquire_reply, expiry_reply, hand_over_reply, release_reply};
use crate::token::OwnerToken;

/// Any reply a server (or a fake one) could send, nested a few levels.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
        "[ -~]{0,12}".prop_map(Value::SimpleString),
        Just(Value::Okay),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        proptest::collection::vec(inner, 0..4).prop_map(Value::Array)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn names_are_accepted_exactly_by_the_rules(name in ".{0,40}|[{}a-z]{0,8}") {
        let ok = crate::check_name(&name).is_ok();
        let rules = !name.is_empty()
            && name.len() <= crate::limits::MAX_NAME_LEN
            && !name.contains(['{', '}']);
        prop_assert_eq!(ok, rules);
    }

    #[test]
    fn long_names_are_refused(extra in 1usize..4096) {
        let name = "n".repeat(crate::limits::MAX_NAME_LEN + extra);
        prop_assert!(crate::check_name(&name).is_err());
    }

    #[test]
    fn lease_lengths_are_accepted_exactly_in_range(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let ttl = Duration::new(secs, nanos);
        let ok = crate::check_ttl(ttl).is_ok();
        prop_assert_eq!(ok, ttl >= crate::limits::MIN_TTL && ttl <= crate::limits::MAX_TTL);
    }

    #[test]
    fn owner_tokens_parse_only_from_32_hex_digits(text in ".{0,40}|[0-9a-fA-F]{30,34}") {
        let parsed = OwnerToken::parse(&text);
        let rules = text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit());
        prop_assert_eq!(parsed.is_some(), rules);
    }

    #[test]
    fn fencing_tokens_parse_only_from_decimals(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        let parsed = crate::kind::parse_token("fuzz", &bytes);
        let rules = std::str::from_utf8(&bytes).ok().and_then(|s| s.parse::<u64>().ok());
        prop_assert_eq!(parsed.ok().map(|t| t.get()), rules);
    }

    #[test]
    fn script_replies_of_any_shape_are_read_or_refused(v in value()) {
        // Typed errors for what is not understood; never a panic.
        let _ = acquire_reply(v.clone());
        let _ = expiry_reply(v.clone());
        let _ = release_reply(v.clone());
        let _ = abandon_reply(v.clone());
        let _ = hand_over_reply(v);
    }
}
