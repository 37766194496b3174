//! The API's guarantees that the compiler enforces: no MPI use after
//! finalize, no buffer freed or read while a request uses it, `Send`/`Sync`
//! only at the thread levels that allow them, `#[derive(Equivalence)]`
//! only for types whose bytes can all be received. Each file under
//! `tests/ui` must fail to compile, with the error recorded beside it.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
