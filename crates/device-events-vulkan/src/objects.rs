//! The Vulkan objects a clock makes, destroyed together: by the clock, or,
//! when it is dropped while the device still uses them, by its device once
//! that is idle.

use ash::vk;

/// The objects a clock makes, destroyed together.
pub(crate) struct Objects {
    pub(crate) pool: vk::CommandPool,
    pub(crate) queries: vk::QueryPool,
    pub(crate) events: [vk::Event; 2],
    pub(crate) gate: vk::Semaphore,
    pub(crate) fence: vk::Fence,
}

impl Objects {
    /// # Safety
    ///
    /// `device` made them, and none is in use: no submission that names
    /// them is pending.
    pub(crate) unsafe fn destroy(self, device: &ash::Device) {
        // SAFETY: the caller's contract; null handles (a clock whose making
        // failed half-way) are ignored by Vulkan.
        unsafe {
            device.destroy_fence(self.fence, None);
            device.destroy_semaphore(self.gate, None);
            for event in self.events {
                device.destroy_event(event, None);
            }
            device.destroy_query_pool(self.queries, None);
            device.destroy_command_pool(self.pool, None);
        }
    }
}
