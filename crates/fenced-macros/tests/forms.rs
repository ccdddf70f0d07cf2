//! Compile tests of `#[fenced::locked]` (trybuild): the accepted forms compile, and each
//! mistake is refused with an error that names it. The expected messages are in `ui/*.stderr`;
//! after a deliberate change of a message, regenerate them with `TRYBUILD=overwrite`.
//!
//! In the slow tier (`scripts/test-slow`): it builds `fenced` a second time. The fast tier has
//! `compile_fail` doctests on `fenced::locked` for the same mistakes.

#[test]
#[ignore = "slow: trybuild builds fenced and its dependencies again (about 100 s on 2 cores); \
            run by scripts/test-slow. The doctests of fenced::locked cover the same mistakes \
            in the fast tier."]
fn locked_attribute_forms() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
