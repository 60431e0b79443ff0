//! CubeCL's own profiling tests, `cubecl_core::testgen_profiling!`, as
//! cubecl-wgpu's lib tests generate them (its `mod tests`, default
//! features), against the cubecl-wgpu this workspace builds: published or
//! patched. Apart from its lib tests so that they build in seconds rather
//! than with the whole suite, and so that `cargo xtask cubecl` can run
//! each in a process of its own.

mod tests {
    pub type TestRuntime = cubecl_wgpu::WgpuRuntime;
    #[allow(unused_imports)]
    use cubecl_core::prelude::*;
    use cubecl_runtime::runtime::Runtime;

    cubecl_core::testgen_profiling!();
}
