//! Declares the `loom` cfg so `#[cfg(loom)]` model-checking code does not
//! trip the `unexpected_cfgs` lint (the workspace lint table cannot be
//! extended per crate).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
