//! Compile tests of `#[fenced::locked]` (trybuild): the accepted forms compile, and each
//! mistake is refused with an error that names it. The expected messages are in `ui/*.stderr`;
//! after a deliberate change of a message, regenerate them with `TRYBUILD=overwrite`.

#[test]
fn locked_attribute_forms() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
