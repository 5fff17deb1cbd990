//! Misuse of `#[interface]` is a compile error that says what is wrong,
//! pointing at the offending part of the trait (tests/ui/*.stderr).
//! Regenerate the expected messages with `TRYBUILD=overwrite`.

#[test]
fn macro_misuse_fails_to_compile_with_a_clear_message() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
