//! A window's reading as CubeCL's `ProfileDuration`: the one place the
//! core's [`Placement`] becomes `cubecl-common`'s `ProfileTicks`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use cubecl_common::profile::{ProfileDuration, ProfileTicks};
use device_events_core::backend::AnchorApi;
use device_events_core::{PlacedWindow, Placement};

/// `window` as the `ProfileDuration` a CubeCL server returns: boxed once,
/// as CubeCL's own servers box theirs, resolving to `None` where the core's
/// reading does.
pub(crate) fn profile_duration<A: AnchorApi>(window: PlacedWindow<A>) -> ProfileDuration {
    ProfileDuration::new_device_time_maybe(Ticks(window))
}

/// A window's future with its placement's bound and device span left out:
/// what CubeCL's `ProfileDuration` holds.
struct Ticks<A: AnchorApi>(PlacedWindow<A>);

impl<A: AnchorApi> Future for Ticks<A> {
    type Output = Option<ProfileTicks>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ProfileTicks>> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|placed| placed.map(ticks))
    }
}

/// The window's ends on the host clock, as CubeCL's ticks.
#[inline]
fn ticks(placed: Placement) -> ProfileTicks {
    ProfileTicks::from_start_end(placed.start, placed.end)
}
