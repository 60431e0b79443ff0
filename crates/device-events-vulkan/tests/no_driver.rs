//! Without a Vulkan driver the backend says so with an error, never a
//! panic: run in a child process whose loader is pointed at no driver.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use device_events_core::ErrorKind;
use device_events_vulkan::VulkanDevice;

const CHILD: &str = "DEVICE_EVENTS_VULKAN_NO_DRIVER_CHILD";

#[test]
fn no_vulkan_driver_is_a_no_device_error() {
    if std::env::var_os(CHILD).is_some() {
        let err = VulkanDevice::open()
            .err()
            .expect("no device opens without a driver");
        assert_eq!(err.kind(), ErrorKind::NoDevice, "{err}");
        println!("the error a user sees: {err}");
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_vulkan_driver_is_a_no_device_error",
            "--nocapture",
        ])
        .env(CHILD, "1")
        // The loader's lists of drivers, both pointed at nothing.
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the child failed: {out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.contains("the error a user sees"), "{out}");
}
